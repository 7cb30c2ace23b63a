//! deb822 control paragraphs: a deb's `control` file, apt's `Packages`
//! index and `apt-cache show` output. One parser and writer for the
//! packaging tools (`rocm-kpack-package`, `rocm-kpack-publish`) and the
//! fetcher's `--via apt`. It is a package manager's format, not one of
//! rocm-kpack's own, so it lives apart from `rocm-kpack-format` (which
//! librocm_kpack links).
//!
//! Only the paragraph syntax lives here (fields in order, continuation
//! lines, comments, blank-line separated paragraphs); which fields a
//! package carries is the packager's business.

/// Control fields of a deb in their original order. Values are stored as
/// written after `Field:` (first line without the leading space,
/// continuation lines joined with `\n` and keeping their leading space).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlFields {
    fields: Vec<(String, String)>,
}

impl ControlFields {
    /// Parses the first paragraph of a deb822 text.
    pub fn parse(text: &str) -> Result<ControlFields, String> {
        let mut fields: Vec<(String, String)> = Vec::new();
        for (lineno, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                if fields.is_empty() {
                    continue;
                }
                break;
            }
            if line.starts_with('#') {
                continue;
            }
            if line.starts_with(' ') || line.starts_with('\t') {
                let last = fields
                    .last_mut()
                    .ok_or_else(|| format!("line {}: continuation before any field", lineno + 1))?;
                last.1.push('\n');
                last.1.push_str(line);
                continue;
            }
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("line {}: expected `Field: value`", lineno + 1))?;
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("line {}: bad field name {name:?}", lineno + 1));
            }
            fields.push((name.to_string(), value.trim().to_string()));
        }
        if fields.is_empty() {
            return Err("no fields".into());
        }
        Ok(ControlFields { fields })
    }

    /// Parses every paragraph of a deb822 text (e.g. a Packages file).
    pub fn parse_all(text: &str) -> Result<Vec<ControlFields>, String> {
        let mut out = Vec::new();
        for para in text.split("\n\n") {
            if para.trim().is_empty() {
                continue;
            }
            out.push(ControlFields::parse(para)?);
        }
        Ok(out)
    }

    /// The value of a field (case-insensitive name).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Sets a field, keeping its position if present, else appending.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        if let Some(slot) = self
            .fields
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            slot.1 = value;
        } else {
            self.fields.push((name.to_string(), value));
        }
    }

    /// Inserts a field before `before` (or appends if absent); replaces an
    /// existing field of that name in place.
    pub fn set_before(&mut self, name: &str, value: impl Into<String>, before: &str) {
        if self.get(name).is_some() {
            self.set(name, value);
            return;
        }
        let pos = self
            .fields
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(before))
            .unwrap_or(self.fields.len());
        self.fields.insert(pos, (name.to_string(), value.into()));
    }

    /// Removes a field.
    pub fn remove(&mut self, name: &str) {
        self.fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    /// Fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// deb822 text of this paragraph (ends with a newline).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (n, v) in &self.fields {
            s.push_str(n);
            s.push(':');
            if !v.is_empty() && !v.starts_with('\n') {
                s.push(' ');
            }
            s.push_str(v);
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_keeps_order_and_continuations() {
        let text = "Package: a\nVersion: 1-2\nDescription: short\n long one\n .\n more\n";
        let c = ControlFields::parse(text).expect("parse");
        assert_eq!(c.get("package"), Some("a"));
        assert_eq!(c.get("Description"), Some("short\n long one\n .\n more"));
        assert_eq!(c.render(), text);
        assert_eq!(
            c.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            ["Package", "Version", "Description"]
        );
    }

    #[test]
    fn first_paragraph_and_all_paragraphs() {
        let text = "\nPackage: a\n# comment\nX-Kpack-Gfx: gfx900 gfx906\n\nPackage: b\n";
        let first = ControlFields::parse(text).expect("parse");
        assert_eq!(first.get("x-kpack-gfx"), Some("gfx900 gfx906"));
        let all = ControlFields::parse_all(text).expect("parse_all");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].get("Package"), Some("b"));
    }

    #[test]
    fn malformed_paragraphs_say_where() {
        assert_eq!(
            ControlFields::parse(" lead\n").expect_err("lead"),
            "line 1: continuation before any field"
        );
        assert_eq!(
            ControlFields::parse("Package: a\nno colon\n").expect_err("colon"),
            "line 2: expected `Field: value`"
        );
        assert_eq!(
            ControlFields::parse("Bad Name: a\n").expect_err("name"),
            "line 1: bad field name \"Bad Name\""
        );
        assert_eq!(
            ControlFields::parse("\n\n").expect_err("empty"),
            "no fields"
        );
    }

    #[test]
    fn set_before_and_remove() {
        let mut c = ControlFields::parse("Package: a\nDepends: b\n").expect("parse");
        c.set_before("Installed-Size", "4", "Depends");
        c.set("package", "z");
        c.remove("Depends");
        assert_eq!(c.render(), "Package: z\nInstalled-Size: 4\n");
        assert!(!c.is_empty());
    }
}
