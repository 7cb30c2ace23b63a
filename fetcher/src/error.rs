//! What the library's errors share: the library returns typed errors
//! (thiserror, each module its own), the binary turns them into `anyhow` at
//! its edge and prints their chain of causes ([`std::error::Error::source`]).

use std::error::Error;
use std::fmt::Write as _;

/// `err` and its causes on one line, `a: b: c`, every cause as it is (what
/// `anyhow` prints for `{:#}`): for messages the library itself composes
/// (a failed transfer, a trigger's one line).
pub fn chain_text(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let _ = write!(text, ": {c}");
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes_follow_the_error() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot lock /x")]
        struct Lock(#[source] std::io::Error);
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "held by pid 1");
        assert_eq!(
            super::chain_text(&Lock(io)),
            "cannot lock /x: held by pid 1"
        );
    }
}
