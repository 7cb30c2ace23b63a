//! URLs as they are shown to people: credentials and secret-looking query
//! values masked, so logs, errors and `--json` output never leak a token.

use std::fmt;

use reqwest::Url;

/// Query keys whose values are masked (signed-URL tokens and the like).
const SECRET_QUERY_KEYS: &[&str] = &[
    "token",
    "access_token",
    "auth",
    "key",
    "password",
    "secret",
    "signature",
    "sig",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
];

/// Displays a URL with `user:password@` and secret query values replaced by
/// `****`.
#[derive(Debug, Clone, Copy)]
pub struct MaskedUrl<'a>(pub &'a Url);

impl fmt::Display for MaskedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(self.0))
    }
}

/// The masked spelling of `url` (see [`MaskedUrl`]).
pub fn masked(url: &Url) -> String {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        // Both setters fail only for URLs that cannot carry credentials,
        // which then have none to hide.
        let _ = shown.set_username("****");
        let _ = shown.set_password(None);
    }
    if shown.query().is_some() {
        let pairs: Vec<(String, String)> = shown
            .query_pairs()
            .map(|(k, v)| {
                let secret = SECRET_QUERY_KEYS.iter().any(|s| k.eq_ignore_ascii_case(s));
                let v = if secret {
                    "****".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(pairs);
    }
    shown.to_string()
}

/// [`masked`] for text that may not even parse as a URL: when it does
/// not, a `user:password@` before the host is still replaced by `****`.
pub fn masked_text(text: &str) -> String {
    if let Ok(url) = Url::parse(text) {
        return masked(&url);
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://****{}{tail}", &authority[at..]),
        None => text.to_string(),
    }
}

/// True for `localhost` and loopback IP literals (127.0.0.0/8, ::1).
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_that_is_no_url_is_masked_too() {
        assert_eq!(
            super::masked_text("https://u:pw@h:99999/x"),
            "https://****@h:99999/x"
        );
        assert_eq!(
            super::masked_text("https://u:pw@h.example/x"),
            "https://****@h.example/x"
        );
        assert_eq!(super::masked_text("no url"), "no url");
    }

    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn masks_credentials() {
        assert_eq!(
            masked(&url("https://alice:s3cret@mirror.example/kpack/a.kpack")),
            "https://****@mirror.example/kpack/a.kpack"
        );
        assert_eq!(
            masked(&url("https://token@mirror.example/x")),
            "https://****@mirror.example/x"
        );
        assert_eq!(
            masked(&url("https://mirror.example/x")),
            "https://mirror.example/x"
        );
    }

    #[test]
    fn masks_secret_query_values_only() {
        let shown = masked(&url(
            "https://h.example/a?X-Amz-Signature=abc&part=2&token=zzz",
        ));
        assert_eq!(
            shown,
            "https://h.example/a?X-Amz-Signature=****&part=2&token=****"
        );
        assert!(!shown.contains("abc") && !shown.contains("zzz"));
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback(&url("http://127.0.0.1:8080/")));
        assert!(is_loopback(&url("http://127.3.2.1/")));
        assert!(is_loopback(&url("http://[::1]:9/")));
        assert!(is_loopback(&url("http://LOCALHOST/")));
        assert!(!is_loopback(&url("http://10.0.0.1/")));
        assert!(!is_loopback(&url("https://example.com/")));
        assert!(!is_loopback(&url("file:///srv/mirror/")));
    }
}
