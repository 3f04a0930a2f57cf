//! A TOML document as JSON plus the file position of every key, so that each configuration
//! problem can be reported as `file:line:column: key.path: message`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// One configuration problem with its place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Dotted key path, e.g. `capabilities."orders.refund".risk`.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            if self.key.is_empty() {
                "(root)"
            } else {
                &self.key
            },
            self.message
        )
    }
}

/// The parsed document: JSON for the typed layer, spans for the messages.
pub struct Located {
    /// The file it came from.
    pub file: PathBuf,
    /// The document as JSON.
    pub json: serde_json::Value,
    text: String,
    /// JSON pointer → byte offset of the key (or value for array items).
    spans: HashMap<String, usize>,
    /// JSON pointers of integers that do not fit in 64 bits (they read as `null`).
    overflow: Vec<String>,
    /// JSON pointer → byte range of a string value, delimiters included.
    strings: HashMap<String, std::ops::Range<usize>>,
}

impl Located {
    /// Parse a TOML file. A syntax error is one located problem.
    pub fn parse(file: &Path, text: String) -> Result<Located, Problem> {
        let parsed = DeTable::parse(&text).map_err(|e| {
            let offset = e.span().map(|s| s.start).unwrap_or(0);
            let (line, column) = line_col(&text, offset);
            Problem {
                file: file.to_path_buf(),
                line,
                column,
                key: String::new(),
                message: format!("not valid TOML: {}", e.message().trim()),
            }
        })?;
        let mut walk = Walk::default();
        let json = table_to_json(parsed.get_ref(), "", &mut walk);
        Ok(Located {
            file: file.to_path_buf(),
            json,
            text,
            spans: walk.spans,
            overflow: walk.overflow,
            strings: walk.strings,
        })
    }

    /// One located problem for every integer that does not fit in a signed 64-bit integer
    /// (the largest TOML integer), instead of a puzzling type error later.
    pub fn overflow_problems(&self) -> Vec<Problem> {
        self.overflow
            .iter()
            .map(|p| {
                self.problem(
                    p,
                    format!(
                        "this integer does not fit in 64 bits (the largest is {})",
                        i64::MAX
                    ),
                )
            })
            .collect()
    }

    /// Is this pointer an integer [`Located::overflow_problems`] already reports?
    pub fn is_overflow(&self, pointer: &str) -> bool {
        self.overflow.iter().any(|p| p == pointer)
    }

    /// A problem at the `chars`-th character of the string at `pointer` (an expression
    /// inside a value, e.g. a CEL rule), counted in the string's value: escapes and the
    /// line break after `\"\"\"` are mapped back to the file. Falls back to
    /// [`Located::problem`] when `pointer` is not a string of this file.
    pub fn problem_in_string(
        &self,
        pointer: &str,
        chars: usize,
        message: impl Into<String>,
    ) -> Problem {
        let Some(range) = self.strings.get(pointer) else {
            return self.problem(pointer, message);
        };
        let offset = range.start + raw_offset(&self.text[range.clone()], chars);
        self.problem_at(offset, pointer, message)
    }

    /// A problem at a JSON pointer (falls back to the nearest located parent).
    pub fn problem(&self, pointer: &str, message: impl Into<String>) -> Problem {
        let mut p = pointer.to_string();
        let offset = loop {
            if let Some(o) = self.spans.get(&p) {
                break *o;
            }
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => break 0,
            }
        };
        self.problem_at(offset, pointer, message)
    }

    fn problem_at(&self, offset: usize, pointer: &str, message: impl Into<String>) -> Problem {
        let (line, column) = line_col(&self.text, offset);
        Problem {
            file: self.file.clone(),
            line,
            column,
            key: dotted(pointer),
            message: message.into(),
        }
    }
}

/// The byte offset, inside a TOML string token `raw` (delimiters included), of the
/// `chars`-th character of its value.
fn raw_offset(raw: &str, chars: usize) -> usize {
    let (delimiter, literal, multi) = if raw.starts_with("\"\"\"") {
        (3, false, true)
    } else if raw.starts_with("'''") {
        (3, true, true)
    } else if raw.starts_with('\'') {
        (1, true, false)
    } else {
        (1, false, false)
    };
    let mut at = delimiter.min(raw.len());
    if multi {
        if raw[at..].starts_with("\r\n") {
            at += 2;
        } else if raw[at..].starts_with('\n') {
            at += 1;
        }
    }
    let mut left = chars;
    let mut it = raw[at..].char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if left == 0 {
            return at + i;
        }
        if c == '\\' && !literal {
            match it.peek().map(|&(_, n)| n) {
                Some('u') => {
                    it.nth(4);
                }
                Some('U') => {
                    it.nth(8);
                }
                // A line-ending backslash: the break and the next line's indent vanish.
                Some(n) if multi && n.is_whitespace() => {
                    while it.peek().is_some_and(|&(_, n)| n.is_whitespace()) {
                        it.next();
                    }
                    continue;
                }
                _ => {
                    it.next();
                }
            }
        }
        left -= 1;
    }
    raw.len()
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `/capabilities/orders.refund/risk` → `capabilities."orders.refund".risk`.
pub fn dotted(pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .map(|seg| {
            let seg = seg.replace("~1", "/").replace("~0", "~");
            if !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                seg
            } else if seg.parse::<usize>().is_ok() {
                format!("[{seg}]")
            } else {
                format!("{seg:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
        .replace(".[", "[")
}

/// Escape one JSON pointer segment.
pub fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// What walking the document collects beside the JSON.
#[derive(Default)]
struct Walk {
    spans: HashMap<String, usize>,
    overflow: Vec<String>,
    strings: HashMap<String, std::ops::Range<usize>>,
}

fn table_to_json(t: &DeTable<'_>, at: &str, walk: &mut Walk) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for (k, v) in t.iter() {
        let key = k.get_ref().to_string();
        let path = format!("{at}/{}", seg(&key));
        walk.spans.insert(path.clone(), k.span().start);
        if matches!(v.get_ref(), DeValue::String(_)) {
            walk.strings.insert(path.clone(), v.span());
        }
        map.insert(key, value_to_json(v.get_ref(), &path, walk));
    }
    serde_json::Value::Object(map)
}

fn value_to_json(v: &DeValue<'_>, at: &str, walk: &mut Walk) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        DeValue::String(s) => J::String(s.to_string()),
        DeValue::Integer(i) => {
            let text = i.as_str().replace('_', "");
            let (negative, digits) = match text.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, text.trim_start_matches('+')),
            };
            let digits = digits
                .trim_start_matches("0x")
                .trim_start_matches("0o")
                .trim_start_matches("0b");
            let signed = if negative {
                format!("-{digits}")
            } else {
                digits.to_string()
            };
            match i64::from_str_radix(&signed, i.radix()) {
                Ok(n) => J::from(n),
                Err(_) => {
                    walk.overflow.push(at.to_string());
                    J::Null
                }
            }
        }
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(J::Null, J::Number),
        DeValue::Boolean(b) => J::Bool(*b),
        DeValue::Datetime(d) => J::String(d.to_string()),
        DeValue::Array(a) => J::Array(
            a.iter()
                .enumerate()
                .map(|(i, item)| {
                    let path = format!("{at}/{i}");
                    walk.spans.insert(path.clone(), item.span().start);
                    if matches!(item.get_ref(), DeValue::String(_)) {
                        walk.strings.insert(path.clone(), item.span());
                    }
                    value_to_json(item.get_ref(), &path, walk)
                })
                .collect(),
        ),
        DeValue::Table(t) => table_to_json(t, at, walk),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_inside_a_string_is_found_in_the_file() {
        let text = "[a]\nx = \"ab\\\"c d\"\ny = '''\nxy\nz'''\nz = [\"\\u00e9 q\"]\n".to_string();
        let doc = Located::parse(Path::new("f.toml"), text).expect("parses");
        // `d` is the 5th character of `ab"c d` (0-based 5), after an escaped quote.
        let p = doc.problem_in_string("/a/x", 5, "here");
        assert_eq!((p.line, p.column), (2, 12));
        // The line break after ''' is not part of the value: `z` is character 3.
        let p = doc.problem_in_string("/a/y", 3, "here");
        assert_eq!((p.line, p.column), (5, 1));
        let p = doc.problem_in_string("/a/z/0", 2, "here");
        assert_eq!((p.line, p.column), (6, 14));
        // Not a string: the key's place.
        let p = doc.problem_in_string("/a/w", 2, "here");
        assert_eq!((p.line, p.column), (1, 2));
    }
}
