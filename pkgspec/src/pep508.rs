//! Python packaging's grammars, for values read from an index or an
//! installed distribution's METADATA before they reach pip's or uv's
//! command line: PEP 503 names, PEP 440 versions and specifiers, PEP 508
//! requirements and their environment markers.
//!
//! Every value here is hostile input (an index, or a directory another
//! user can write on `sys.path`, chose it), so parsing is strict: a name
//! that is not PEP 508's, a version that is not PEP 440's or a requirement
//! with anything left over is an error, and what is passed on is always
//! re-rendered from the parsed parts ([`Requirement::render`]), never the
//! text as read.
//!
//! Markers are evaluated for every extra, as PEP 508 says: `x; extra ==
//! "a" or extra == "b"` is required by both `a` and `b`
//! ([`Requirement::extras_requiring`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use crate::fields::{check, FieldKind, NameError};

/// Longest requirement or version text read (METADATA lines are short;
/// anything longer is not a real one).
const MAX_TEXT: usize = 4096;

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {shown}: {reason}")]
pub struct Pep508Error {
    /// What the value was to be (`requirement`, `version`).
    pub what: &'static str,
    /// The value, escaped and shortened.
    pub shown: String,
    /// Why it is refused.
    pub reason: String,
}

fn err(what: &'static str, text: &str, reason: impl fmt::Display) -> Pep508Error {
    Pep508Error {
        what,
        shown: rocm_kpack_format::layout::names::shown(text),
        reason: reason.to_string(),
    }
}

/// A name in its PEP 503 normal form (`Device_GFX942` -> `device-gfx942`);
/// extras normalize the same way (PEP 685).
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            dash = true;
            continue;
        }
        if dash && !out.is_empty() {
            out.push('-');
        }
        dash = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Checks a distribution name or extra against PEP 508's name grammar
/// (letters, digits, `-_.`, starting and ending with a letter or digit).
pub fn check_name(name: &str) -> Result<(), NameError> {
    check(FieldKind::WheelName, name)
}

/// A PEP 440 version.
#[derive(Debug, Clone)]
pub struct Version {
    epoch: u64,
    release: Vec<u64>,
    /// (0 = a, 1 = b, 2 = rc, number)
    pre: Option<(u8, u64)>,
    post: Option<u64>,
    dev: Option<u64>,
    local: Vec<LocalPart>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum LocalPart {
    // Strings sort before numbers (PEP 440).
    Text(String),
    Number(u64),
}

impl Version {
    /// Parses a version in any spelling PEP 440 normalizes (`1.0RC1`,
    /// `1.0-post1`, `v2`); refuses everything else.
    pub fn parse(text: &str) -> Result<Version, Pep508Error> {
        let bad = |why: &str| err("version", text, why);
        if text.is_empty() || text.len() > 256 {
            return Err(bad("empty or too long"));
        }
        let lower = text.trim().to_ascii_lowercase();
        let mut s: &str = lower.strip_prefix('v').unwrap_or(&lower);
        let (public, local) = match s.split_once('+') {
            Some((p, l)) => (p, Some(l)),
            None => (s, None),
        };
        s = public;
        let mut epoch = 0;
        if let Some((e, rest)) = s.split_once('!') {
            epoch = number(e).ok_or_else(|| bad("bad epoch"))?;
            s = rest;
        }
        let digits_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (rel, mut rest) = s.split_at(digits_end);
        let rel = rel.strip_suffix('.').unwrap_or(rel);
        let release: Option<Vec<u64>> = rel.split('.').map(number).collect();
        let release =
            release.ok_or_else(|| bad("the release must be numbers separated by dots"))?;
        let mut pre = None;
        let mut post = None;
        let mut dev = None;
        // Pre-release.
        let trimmed = rest.trim_start_matches(['.', '-', '_']);
        for (spell, kind) in [
            ("alpha", 0u8),
            ("beta", 1),
            ("preview", 2),
            ("pre", 2),
            ("rc", 2),
            ("a", 0),
            ("b", 1),
            ("c", 2),
        ] {
            if let Some(after) = trimmed.strip_prefix(spell) {
                let after = after.trim_start_matches(['.', '-', '_']);
                let (n, after) = leading_number(after);
                pre = Some((kind, n.unwrap_or(0)));
                rest = after;
                break;
            }
        }
        // Post-release (`.post1`, `-1`).
        let trimmed = rest.trim_start_matches(['.', '_']);
        if let Some(after) = trimmed
            .strip_prefix("post")
            .or_else(|| trimmed.strip_prefix("rev"))
            .or_else(|| trimmed.strip_prefix('r'))
        {
            let after = after.trim_start_matches(['.', '-', '_']);
            let (n, after) = leading_number(after);
            post = Some(n.unwrap_or(0));
            rest = after;
        } else if let Some(after) = rest.strip_prefix('-') {
            let (n, after) = leading_number(after);
            let n = n.ok_or_else(|| bad("`-` must be followed by a post-release number"))?;
            post = Some(n);
            rest = after;
        }
        // Development release.
        let trimmed = rest.trim_start_matches(['.', '-', '_']);
        if let Some(after) = trimmed.strip_prefix("dev") {
            let (n, after) = leading_number(after.trim_start_matches(['.', '-', '_']));
            dev = Some(n.unwrap_or(0));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(bad("not a PEP 440 version"));
        }
        let mut parts = Vec::new();
        if let Some(local) = local {
            for p in local.split(['.', '-', '_']) {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(bad("bad local version label"));
                }
                parts.push(match number(p) {
                    Some(n) => LocalPart::Number(n),
                    None => LocalPart::Text(p.to_string()),
                });
            }
        }
        Ok(Version {
            epoch,
            release,
            pre,
            post,
            dev,
            local: parts,
        })
    }

    /// Whether it is a pre-release or development release.
    pub fn is_prerelease(&self) -> bool {
        self.pre.is_some() || self.dev.is_some()
    }

    fn release_at(&self, i: usize) -> u64 {
        self.release.get(i).copied().unwrap_or(0)
    }

    fn cmp_release(&self, other: &Version) -> Ordering {
        let n = self.release.len().max(other.release.len());
        (0..n)
            .map(|i| self.release_at(i).cmp(&other.release_at(i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// The ordering key of everything but the local label.
    fn cmp_public(&self, other: &Version) -> Ordering {
        // PEP 440: dev of a release sorts before its pre-releases; a
        // release without pre sorts after them; post after the release.
        fn pre_key(v: &Version) -> (i8, u64) {
            match (v.pre, v.post, v.dev) {
                (None, None, Some(_)) => (-1, 0),
                (Some((k, n)), _, _) => (k as i8, n),
                _ => (3, 0),
            }
        }
        fn post_key(v: &Version) -> i128 {
            v.post.map_or(-1, i128::from)
        }
        fn dev_key(v: &Version) -> i128 {
            v.dev.map_or(i128::MAX, i128::from)
        }
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| self.cmp_release(other))
            .then_with(|| pre_key(self).cmp(&pre_key(other)))
            .then_with(|| post_key(self).cmp(&post_key(other)))
            .then_with(|| dev_key(self).cmp(&dev_key(other)))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_public(other)
            .then_with(|| self.local.cmp(&other.local))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.epoch != 0 {
            write!(f, "{}!", self.epoch)?;
        }
        let release: Vec<String> = self.release.iter().map(u64::to_string).collect();
        f.write_str(&release.join("."))?;
        if let Some((k, n)) = self.pre {
            write!(f, "{}{n}", ["a", "b", "rc"][usize::from(k.min(2))])?;
        }
        if let Some(n) = self.post {
            write!(f, ".post{n}")?;
        }
        if let Some(n) = self.dev {
            write!(f, ".dev{n}")?;
        }
        if !self.local.is_empty() {
            let local: Vec<String> = self
                .local
                .iter()
                .map(|p| match p {
                    LocalPart::Text(t) => t.clone(),
                    LocalPart::Number(n) => n.to_string(),
                })
                .collect();
            write!(f, "+{}", local.join("."))?;
        }
        Ok(())
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn leading_number(s: &str) -> (Option<u64>, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (number(&s[..end]), &s[end..])
}

/// Checks that `text` is a PEP 440 version.
pub fn check_version(text: &str) -> Result<(), Pep508Error> {
    Version::parse(text).map(|_| ())
}

/// One version clause (`>=2.1`, `==7.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// `==`, `!=`, `<=`, `>=`, `<`, `>`, `~=`, `===`.
    pub op: String,
    /// The version text (with `.*` for a prefix match).
    pub version: String,
}

/// A comma-separated list of clauses; empty matches every version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specifiers(pub Vec<Clause>);

const OPS: &[&str] = &["===", "~=", "==", "!=", "<=", ">=", "<", ">"];

impl Specifiers {
    /// Parses `>=1,<2` (spaces allowed; empty is no constraint).
    pub fn parse(text: &str) -> Result<Specifiers, Pep508Error> {
        let mut out = Vec::new();
        if text.trim().is_empty() {
            return Ok(Specifiers(out));
        }
        for part in text.split(',') {
            let part = part.trim();
            let op = OPS
                .iter()
                .find(|o| part.starts_with(**o))
                .ok_or_else(|| err("version specifier", text, "no comparison operator"))?;
            let version = part[op.len()..].trim();
            let plain = version.strip_suffix(".*").unwrap_or(version);
            if *op == "===" {
                if version.is_empty()
                    || !version
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._+!-".contains(&b))
                {
                    return Err(err("version specifier", text, "bad arbitrary version"));
                }
            } else {
                Version::parse(plain)?;
                if version.ends_with(".*") && !matches!(*op, "==" | "!=") {
                    return Err(err("version specifier", text, "`.*` only with == and !="));
                }
            }
            out.push(Clause {
                op: op.to_string(),
                version: version.to_string(),
            });
        }
        Ok(Specifiers(out))
    }

    /// Whether `v` satisfies every clause.
    pub fn contains(&self, v: &Version) -> bool {
        self.0.iter().all(|c| clause_contains(c, v))
    }
}

impl fmt::Display for Specifiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|c| format!("{}{}", c.op, c.version))
            .collect();
        f.write_str(&parts.join(","))
    }
}

fn clause_contains(c: &Clause, v: &Version) -> bool {
    if c.op == "===" {
        return v.to_string() == c.version;
    }
    let (text, prefix) = match c.version.strip_suffix(".*") {
        Some(t) => (t, true),
        None => (c.version.as_str(), false),
    };
    let Ok(want) = Version::parse(text) else {
        return false;
    };
    let prefix_match = || {
        v.epoch == want.epoch
            && (0..want.release.len()).all(|i| v.release_at(i) == want.release_at(i))
    };
    match c.op.as_str() {
        "==" if prefix => prefix_match(),
        "!=" if prefix => !prefix_match(),
        // A version without a local label matches any local label.
        "==" => {
            if want.local.is_empty() {
                v.cmp_public(&want) == Ordering::Equal
            } else {
                *v == want
            }
        }
        "!=" => {
            if want.local.is_empty() {
                v.cmp_public(&want) != Ordering::Equal
            } else {
                *v != want
            }
        }
        "<=" => v.cmp_public(&want) != Ordering::Greater,
        ">=" => v.cmp_public(&want) != Ordering::Less,
        "<" => v.cmp_public(&want) == Ordering::Less,
        ">" => v.cmp_public(&want) == Ordering::Greater,
        "~=" => {
            let keep = want.release.len().saturating_sub(1).max(1);
            v.cmp_public(&want) != Ordering::Less
                && v.epoch == want.epoch
                && (0..keep).all(|i| v.release_at(i) == want.release_at(i))
        }
        _ => false,
    }
}

/// The values of the environment markers for one interpreter
/// (`python_version`, `sys_platform`, ...), as `packaging` computes them.
pub type MarkerEnv = BTreeMap<String, String>;

/// The marker variables PEP 508 defines (and the legacy `extra`).
const MARKER_VARS: &[&str] = &[
    "python_version",
    "python_full_version",
    "os_name",
    "sys_platform",
    "platform_release",
    "platform_system",
    "platform_version",
    "platform_machine",
    "platform_python_implementation",
    "implementation_name",
    "implementation_version",
    "extra",
];

/// A parsed environment marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Both must hold.
    And(Box<Marker>, Box<Marker>),
    /// Either holds.
    Or(Box<Marker>, Box<Marker>),
    /// `lhs op rhs`, each a variable name or a quoted string.
    Compare(Operand, String, Operand),
}

/// One side of a marker comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A marker variable.
    Var(String),
    /// A quoted string.
    Text(String),
}

impl Marker {
    /// Parses a marker expression.
    pub fn parse(text: &str) -> Result<Marker, Pep508Error> {
        let tokens = tokenize(text)?;
        let mut p = Parser {
            tokens: &tokens,
            at: 0,
            text,
        };
        let m = p.or()?;
        if p.at != tokens.len() {
            return Err(err("marker", text, "unexpected text after the expression"));
        }
        Ok(m)
    }

    /// Evaluates it with `env` and `extra` (PEP 685 normalized; `""`: none).
    pub fn evaluate(&self, env: &MarkerEnv, extra: &str) -> bool {
        match self {
            Marker::And(a, b) => a.evaluate(env, extra) && b.evaluate(env, extra),
            Marker::Or(a, b) => a.evaluate(env, extra) || b.evaluate(env, extra),
            Marker::Compare(l, op, r) => {
                let is_extra = |o: &Operand| matches!(o, Operand::Var(v) if v == "extra");
                let value = |o: &Operand| -> String {
                    match o {
                        Operand::Var(v) if v == "extra" => extra.to_string(),
                        Operand::Var(v) => env.get(v).cloned().unwrap_or_default(),
                        Operand::Text(t) if is_extra(l) || is_extra(r) => normalize(t),
                        Operand::Text(t) => t.clone(),
                    }
                };
                compare(&value(l), op, &value(r), is_extra(l) || is_extra(r))
            }
        }
    }
}

fn compare(l: &str, op: &str, r: &str, extra: bool) -> bool {
    match op {
        "in" => r.contains(l),
        "not in" => !r.contains(l),
        _ => {
            if !extra {
                if let (Ok(spec), Ok(v)) =
                    (Specifiers::parse(&format!("{op}{r}")), Version::parse(l))
                {
                    return spec.contains(&v);
                }
            }
            match op {
                "==" | "===" => l == r,
                "!=" => l != r,
                "<" => l < r,
                "<=" => l <= r,
                ">" => l > r,
                ">=" => l >= r,
                _ => false,
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Op(String),
    Var(String),
    Text(String),
}

fn tokenize(text: &str) -> Result<Vec<Token>, Pep508Error> {
    let bad = |why: &str| err("marker", text, why);
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '(' {
            out.push(Token::Open);
            i += 1;
        } else if c == ')' {
            out.push(Token::Close);
            i += 1;
        } else if c == '"' || c == '\'' {
            let end = chars[i + 1..]
                .iter()
                .position(|&d| d == c)
                .ok_or_else(|| bad("unterminated string"))?;
            out.push(Token::Text(chars[i + 1..i + 1 + end].iter().collect()));
            i += end + 2;
        } else if "<>=!~".contains(c) {
            let mut op = String::from(c);
            while i + op.len() < chars.len() && "<>=!~".contains(chars[i + op.len()]) {
                op.push(chars[i + op.len()]);
            }
            if !OPS.contains(&op.as_str()) {
                return Err(bad("bad comparison operator"));
            }
            i += op.len();
            out.push(Token::Op(op));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            match word.as_str() {
                "and" => out.push(Token::And),
                "or" => out.push(Token::Or),
                "in" => out.push(Token::Op("in".into())),
                "not" => {
                    // Only `not in`.
                    while i < chars.len() && chars[i].is_whitespace() {
                        i += 1;
                    }
                    if chars.get(i..i + 2) != Some(&['i', 'n'][..]) {
                        return Err(bad("`not` only in `not in`"));
                    }
                    i += 2;
                    out.push(Token::Op("not in".into()));
                }
                w => {
                    // `os.name` and friends are legacy spellings.
                    let var = w.replace('.', "_");
                    if !MARKER_VARS.contains(&var.as_str()) {
                        return Err(bad("unknown marker variable"));
                    }
                    out.push(Token::Var(var));
                }
            }
        } else {
            return Err(bad("unexpected character"));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn or(&mut self) -> Result<Marker, Pep508Error> {
        let mut left = self.and()?;
        while self.tokens.get(self.at) == Some(&Token::Or) {
            self.at += 1;
            let right = self.and()?;
            left = Marker::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Marker, Pep508Error> {
        let mut left = self.atom()?;
        while self.tokens.get(self.at) == Some(&Token::And) {
            self.at += 1;
            let right = self.atom()?;
            left = Marker::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn atom(&mut self) -> Result<Marker, Pep508Error> {
        if self.tokens.get(self.at) == Some(&Token::Open) {
            self.at += 1;
            let m = self.or()?;
            if self.tokens.get(self.at) != Some(&Token::Close) {
                return Err(err("marker", self.text, "missing `)`"));
            }
            self.at += 1;
            return Ok(m);
        }
        let l = self.operand()?;
        let op = match self.tokens.get(self.at) {
            Some(Token::Op(op)) => op.clone(),
            _ => return Err(err("marker", self.text, "expected a comparison")),
        };
        self.at += 1;
        let r = self.operand()?;
        Ok(Marker::Compare(l, op, r))
    }

    fn operand(&mut self) -> Result<Operand, Pep508Error> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        match t {
            Some(Token::Var(v)) => Ok(Operand::Var(v)),
            Some(Token::Text(t)) => Ok(Operand::Text(t)),
            _ => Err(err("marker", self.text, "expected a variable or a string")),
        }
    }
}

/// A PEP 508 requirement read from input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The name as written (checked).
    pub name: String,
    /// Extras, PEP 685 normalized.
    pub extras: Vec<String>,
    /// Version constraints.
    pub specifiers: Specifiers,
    /// A direct reference (`name @ URL`), kept only so callers can refuse it.
    pub url: Option<String>,
    /// The marker, if any.
    pub marker: Option<Marker>,
}

impl Requirement {
    /// Parses one requirement (`rocm[libraries,device-all]==7.14; python_version >= "3.9"`).
    pub fn parse(text: &str) -> Result<Requirement, Pep508Error> {
        if text.len() > MAX_TEXT {
            return Err(err("requirement", text, "too long"));
        }
        let (head, marker) = match text.split_once(';') {
            Some((h, m)) => (h, Some(Marker::parse(m.trim())?)),
            None => (text, None),
        };
        let head = head.trim();
        let end = head
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(head.len());
        let name = &head[..end];
        check_name(name).map_err(|e| err("requirement", text, e.reason))?;
        let mut rest = head[end..].trim_start();
        let mut extras = Vec::new();
        if let Some(inner) = rest.strip_prefix('[') {
            let close = inner
                .find(']')
                .ok_or_else(|| err("requirement", text, "missing `]`"))?;
            for e in inner[..close]
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
            {
                check_name(e).map_err(|x| err("requirement", text, x.reason))?;
                extras.push(normalize(e));
            }
            rest = inner[close + 1..].trim_start();
        }
        let mut url = None;
        let specifiers = if let Some(u) = rest.strip_prefix('@') {
            url = Some(u.trim().to_string());
            Specifiers::default()
        } else {
            let spec = rest
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or(rest);
            Specifiers::parse(spec)?
        };
        Ok(Requirement {
            name: name.to_string(),
            extras,
            specifiers,
            url,
            marker,
        })
    }

    /// The PEP 503 name.
    pub fn key(&self) -> String {
        normalize(&self.name)
    }

    /// Whether it applies with `env` when the distribution that declares
    /// it is installed with `extras` (PEP 685 normalized): the marker holds
    /// for no extra or for one of them.
    pub fn applies(&self, env: &MarkerEnv, extras: &[String]) -> bool {
        match &self.marker {
            None => true,
            Some(m) => m.evaluate(env, "") || extras.iter().any(|e| m.evaluate(env, e)),
        }
    }

    /// Of `declared` (a distribution's `Provides-Extra`, normalized), the
    /// extras that make this requirement apply where it does not apply
    /// without one; empty for a requirement that applies anyway (or never).
    pub fn extras_requiring(&self, env: &MarkerEnv, declared: &[String]) -> Vec<String> {
        let Some(m) = &self.marker else {
            return Vec::new();
        };
        if m.evaluate(env, "") {
            return Vec::new();
        }
        declared
            .iter()
            .filter(|e| m.evaluate(env, e))
            .cloned()
            .collect()
    }

    /// The requirement as passed on: the PEP 503 name, the extras and the
    /// version constraints, re-rendered from the parsed parts (no marker,
    /// no URL: callers have evaluated the one and refused the other).
    pub fn render(&self, extras: &[String]) -> String {
        let mut out = self.key();
        if !extras.is_empty() {
            out.push('[');
            out.push_str(&extras.join(","));
            out.push(']');
        }
        out.push_str(&self.specifiers.to_string());
        out
    }
}

/// A wheel file name split as PEP 427 spells it:
/// `name-version[-build]-py-abi-platform.whl`. Nothing is validated here:
/// each part still goes through its field's validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelFileName<'a> {
    /// The distribution, as spelled in the file name.
    pub dist: &'a str,
    /// The version.
    pub version: &'a str,
    /// The compressed tag triple (`py2.py3-none-any`).
    pub triple: String,
}

impl<'a> WheelFileName<'a> {
    /// `None` unless `file` ends in `.whl` and has five or six `-` parts.
    pub fn parse(file: &'a str) -> Option<WheelFileName<'a>> {
        let parts: Vec<&str> = file.strip_suffix(".whl")?.split('-').collect();
        let (dist, version, py, abi, plat) = match parts.as_slice() {
            [d, v, py, abi, plat] | [d, v, _, py, abi, plat] => (*d, *v, *py, *abi, *plat),
            _ => return None,
        };
        Some(WheelFileName {
            dist,
            version,
            triple: format!("{py}-{abi}-{plat}"),
        })
    }

    /// Every tag the compressed triple stands for (`py2.py3-none-any`:
    /// `py2-none-any`, `py3-none-any`).
    pub fn tags(&self) -> Vec<String> {
        let parts: Vec<Vec<&str>> = self
            .triple
            .split('-')
            .map(|p| p.split('.').collect())
            .collect();
        let mut out = Vec::new();
        if let [py, abi, plat] = parts.as_slice() {
            for a in py {
                for b in abi {
                    for c in plat {
                        out.push(format!("{a}-{b}-{c}"));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    #[test]
    fn wheel_file_names_split_and_expand_as_pep_427_spells_them() {
        let n = WheelFileName::parse("x-1.0-1build-py2.py3-none-any.whl").expect("a wheel name");
        assert_eq!((n.dist, n.version), ("x", "1.0"));
        assert_eq!(n.tags(), ["py2-none-any", "py3-none-any"]);
        for bad in [
            "x-1.0-py3-none.whl",
            "x-1.0-py3-none-any.tar.gz",
            "a-b-c-d-e-f-g.whl",
        ] {
            assert_eq!(WheelFileName::parse(bad), None, "{bad}");
        }
    }

    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn env() -> MarkerEnv {
        [
            ("python_version", "3.11"),
            ("python_full_version", "3.11.7"),
            ("sys_platform", "linux"),
            ("platform_machine", "x86_64"),
            ("os_name", "posix"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn versions_order_as_pep_440_says() {
        let order = [
            "1.0.dev1",
            "1.0a1",
            "1.0a2.dev1",
            "1.0a2",
            "1.0b1",
            "1.0rc1",
            "1.0",
            "1.0+local",
            "1.0.post1",
            "1.1",
            "2!0.1",
        ];
        for w in order.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(v("1.0"), v("1.0.0"));
        assert_eq!(v("1.0RC1").to_string(), "1.0rc1");
        assert_eq!(v("7.14.0+rocm7.14").to_string(), "7.14.0+rocm7.14");
        for bad in [
            "",
            "1.0 --no-deps",
            "--index-url=http://x/#",
            "1..0x",
            "1.0+",
            "abc",
            "1.0/2",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn specifiers_match() {
        let s = Specifiers::parse(">=2.1, <3").unwrap();
        assert!(s.contains(&v("2.5")) && !s.contains(&v("3.0")) && !s.contains(&v("2.0")));
        assert!(Specifiers::parse("==7.*").unwrap().contains(&v("7.14")));
        assert!(Specifiers::parse("==7.14")
            .unwrap()
            .contains(&v("7.14+kpack1")));
        assert!(!Specifiers::parse("==7.14+a")
            .unwrap()
            .contains(&v("7.14+b")));
        assert!(Specifiers::parse("~=2.2").unwrap().contains(&v("2.9")));
        assert!(!Specifiers::parse("~=2.2.1").unwrap().contains(&v("2.3")));
        assert!(Specifiers::parse("!=1.*").unwrap().contains(&v("2.0")));
        assert!(Specifiers::parse(">=1 --no-deps").is_err());
    }

    #[test]
    fn markers_are_evaluated_for_every_extra() {
        let r = Requirement::parse(
            "x-device-gfx11-generic; extra == \"device-gfx1100\" or extra == 'Device_GFX1101'",
        )
        .unwrap();
        let declared: Vec<String> = ["device-gfx1100", "device-gfx1101", "device-gfx90a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            r.extras_requiring(&env(), &declared),
            ["device-gfx1100", "device-gfx1101"]
        );
        assert!(!r.applies(&env(), &[]));
        assert!(r.applies(&env(), &["device-gfx1101".into()]));
        let r = Requirement::parse(
            "y; python_version >= \"3.9\" and (sys_platform == 'linux' or os_name == 'nt')",
        )
        .unwrap();
        assert!(r.applies(&env(), &[]));
        assert!(r.extras_requiring(&env(), &declared).is_empty());
        let r =
            Requirement::parse("z; python_version < \"3.8\" and extra == 'device-gfx90a'").unwrap();
        assert!(r.extras_requiring(&env(), &declared).is_empty());
        let r = Requirement::parse("rocm[libraries,Device_All]==7.14").unwrap();
        assert_eq!(r.extras, ["libraries", "device-all"]);
        assert_eq!(r.render(&r.extras), "rocm[libraries,device-all]==7.14");
        assert_eq!(
            Requirement::parse("x @ file:///tmp/x.whl")
                .unwrap()
                .url
                .as_deref(),
            Some("file:///tmp/x.whl")
        );
        for bad in [
            "--index-url=http://attacker/#",
            "x ==1.0 --no-deps",
            "x; os_name == 'a' junk",
            "x; __import__('os')",
            "x[a b]",
            "",
        ] {
            assert!(Requirement::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize("Device_GFX942"), "device-gfx942");
        assert_eq!(normalize("amd.torch--device"), "amd-torch-device");
        assert!(check_name("torch").is_ok());
        assert!(check_name("--index-url=http://x").is_err());
        assert!(check_name("a b").is_err());
    }
}
