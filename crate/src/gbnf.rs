//! GBNF (llama.cpp's grammar format) to the Lark dialect llguidance reads, so grammars written
//! for llama.cpp, wllama or node-llama-cpp work as they are.
//!
//! GBNF: `name ::= alternatives`, `"literals"` with `\n \t \r \" \\ \xHH \uHHHH \UHHHHHHHH`,
//! character classes `[a-z]` / `[^"\\]`, `.`, groups, `|`, `* + ?` and `{m}`, `{m,}`, `{m,n}`,
//! `#` comments; a rule ends at a newline unless inside parentheses or after `|` / `::=`; the
//! start rule is `root`. Names become Lark rule names (lowercased; `root` becomes `start`).

use std::collections::HashMap;

use crate::error::{Error, Result};

/// Most rules and nesting accepted (grammars come from requests: bound the work).
const MAX_RULES: usize = 10_000;
const MAX_DEPTH: usize = 64;

/// The Lark text of a GBNF grammar, or an `InvalidOption` error naming the position.
pub fn to_lark(src: &str) -> Result<String> {
    let mut p = Parser { s: src.as_bytes(), src, i: 0, depth: 0 };
    let mut rules: Vec<(String, Alt)> = Vec::new();
    p.space(true);
    while p.i < p.s.len() {
        let name = p.name()?;
        p.space(false);
        if !p.eat("::=") {
            return Err(p.err("expected ::="));
        }
        p.space(true);
        let mut alt = p.alternates()?;
        // A rule defined twice (`a ::= x` then `a ::= y`) is one rule `a: x | y`.
        match rules.iter_mut().find(|(n, _)| *n == name) {
            Some((_, first)) => first.append(&mut alt),
            None => rules.push((name, alt)),
        }
        if rules.len() > MAX_RULES {
            return Err(p.err("too many rules"));
        }
        p.space(false);
        if p.i < p.s.len() && p.s[p.i] != b'\n' && p.s[p.i] != b'\r' {
            return Err(p.err("expected the end of the rule"));
        }
        p.space(true);
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err(Error::InvalidOption("GBNF grammar: no `root` rule".into()));
    }
    // Lark rule names: lowercase letters, digits, '_' and '-', starting with a letter.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut taken = std::collections::HashSet::new();
    taken.insert("start".to_string());
    names.insert("root".into(), "start".into());
    for (n, _) in &rules {
        if names.contains_key(n) {
            continue;
        }
        let mut base: String = n.to_ascii_lowercase();
        if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
            base = format!("r-{base}");
        }
        let mut name = base.clone();
        let mut k = 1;
        while !taken.insert(name.clone()) {
            k += 1;
            name = format!("{base}-{k}");
        }
        names.insert(n.clone(), name);
    }
    let mut out = String::new();
    for (n, alt) in &rules {
        out += &names[n];
        out += ": ";
        write_alt(alt, &names, &mut out)?;
        out.push('\n');
    }
    Ok(out)
}

type Alt = Vec<Vec<Item>>;

enum Atom {
    Name(String),
    Literal(String),
    /// A regular expression (character class or `.`).
    Regex(String),
    Group(Alt),
}

struct Item {
    atom: Atom,
    /// `*`, `+`, `?`, or `{m,n}` (as Lark writes them), innermost first.
    ops: Vec<String>,
}

fn write_alt(alt: &Alt, names: &HashMap<String, String>, out: &mut String) -> Result<()> {
    for (i, seq) in alt.iter().enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        if seq.is_empty() {
            out.push_str("\"\"");
        }
        for (j, item) in seq.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            let mut s = match &item.atom {
                Atom::Name(n) => names
                    .get(n)
                    .cloned()
                    .ok_or_else(|| Error::InvalidOption(format!("GBNF grammar: rule `{n}` is used but not defined")))?,
                Atom::Literal(l) => serde_json::to_string(l).expect("strings serialize"),
                Atom::Regex(r) => format!("/{r}/"),
                Atom::Group(g) => {
                    let mut inner = String::from("(");
                    write_alt(g, names, &mut inner)?;
                    inner.push(')');
                    inner
                }
            };
            for (k, op) in item.ops.iter().enumerate() {
                if k > 0 {
                    s = format!("({s})");
                }
                s += op;
            }
            out.push_str(&s);
        }
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        let line = self.src[..self.i.min(self.src.len())].matches('\n').count() + 1;
        let rest: String = self.src.get(self.i..).unwrap_or("").chars().take(20).collect();
        Error::InvalidOption(format!("GBNF grammar, line {line}: {what} at {rest:?}"))
    }

    fn eat(&mut self, t: &str) -> bool {
        if self.s[self.i..].starts_with(t.as_bytes()) {
            self.i += t.len();
            true
        } else {
            false
        }
    }

    /// Skip spaces and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while self.i < self.s.len() {
            match self.s[self.i] {
                b' ' | b'\t' => self.i += 1,
                b'\r' | b'\n' if newlines => self.i += 1,
                b'#' => {
                    while self.i < self.s.len() && self.s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String> {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'-' || self.s[self.i] == b'_')
        {
            self.i += 1;
        }
        if self.i == start {
            return Err(self.err("expected a rule name"));
        }
        Ok(self.src[start..self.i].to_string())
    }

    fn alternates(&mut self) -> Result<Alt> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        let mut alt = vec![self.sequence()?];
        while self.i < self.s.len() && self.s[self.i] == b'|' {
            self.i += 1;
            self.space(true);
            alt.push(self.sequence()?);
        }
        self.depth -= 1;
        Ok(alt)
    }

    fn sequence(&mut self) -> Result<Vec<Item>> {
        let nested = self.depth > 1;
        let mut seq = Vec::new();
        loop {
            self.space(nested);
            let Some(&c) = self.s.get(self.i) else { break };
            let atom = match c {
                b'|' | b')' | b'\n' | b'\r' => break,
                b'"' => Atom::Literal(self.literal()?),
                b'[' => Atom::Regex(self.class()?),
                b'.' => {
                    self.i += 1;
                    Atom::Regex("(?s:.)".into())
                }
                b'(' => {
                    self.i += 1;
                    self.space(true);
                    let g = self.alternates()?;
                    self.space(true);
                    if !self.eat(")") {
                        return Err(self.err("expected )"));
                    }
                    Atom::Group(g)
                }
                c if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' => {
                    let save = self.i;
                    let n = self.name()?;
                    // `name ::=` starts the next rule: this sequence ended at a newline before it.
                    let after = self.i;
                    self.space(false);
                    if self.eat("::=") {
                        self.i = save;
                        break;
                    }
                    self.i = after;
                    Atom::Name(n)
                }
                _ => return Err(self.err("unexpected character")),
            };
            let mut ops = Vec::new();
            loop {
                match self.s.get(self.i) {
                    Some(b'*') | Some(b'+') | Some(b'?') => {
                        ops.push((self.s[self.i] as char).to_string());
                        self.i += 1;
                    }
                    Some(b'{') => ops.push(self.braces()?),
                    _ => break,
                }
            }
            seq.push(Item { atom, ops });
        }
        Ok(seq)
    }

    fn braces(&mut self) -> Result<String> {
        let start = self.i;
        let end = self.src[start..].find('}').ok_or_else(|| self.err("expected }"))? + start;
        let body = self.src[start + 1..end].replace(' ', "");
        let num = |t: &str| match t.parse::<u32>() {
            Ok(v) => Ok(v),
            Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
                Err(self.err(&format!("repetition count {t} is too large")))
            }
            Err(_) => Err(self.err("expected a number")),
        };
        let (m, n) = match body.split_once(',') {
            None => (num(&body)?, Some(num(&body)?)),
            Some((a, "")) => (num(a)?, None),
            Some((a, b)) => (num(a)?, Some(num(b)?)),
        };
        if n.is_some_and(|n| n < m || n == 0) {
            return Err(self.err("bad repetition bounds"));
        }
        self.i = end + 1;
        Ok(match n {
            Some(n) if n == m => format!("{{{m}}}"),
            Some(n) => format!("{{{m},{n}}}"),
            None => format!("{{{m},}}"),
        })
    }

    /// One character of a literal or class, after a backslash or as is.
    fn char(&mut self) -> Result<char> {
        let rest = &self.src[self.i..];
        let c = rest.chars().next().ok_or_else(|| self.err("unexpected end"))?;
        self.i += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let e = self.src[self.i..].chars().next().ok_or_else(|| self.err("unexpected end"))?;
        self.i += e.len_utf8();
        let hex = |p: &mut Self, n: usize| -> Result<char> {
            let h = p.src.get(p.i..p.i + n).ok_or_else(|| p.err("short escape"))?;
            let v = u32::from_str_radix(h, 16).map_err(|_| p.err("bad escape"))?;
            p.i += n;
            char::from_u32(v).ok_or_else(|| p.err("bad code point"))
        };
        Ok(match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            other => other, // \" \\ \] \[ \- and the like stand for themselves
        })
    }

    fn literal(&mut self) -> Result<String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.s.get(self.i) {
                None | Some(b'\n') => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => out.push(self.char()?),
            }
        }
    }

    fn class(&mut self) -> Result<String> {
        self.i += 1;
        let mut out = String::from("[");
        if self.s.get(self.i) == Some(&b'^') {
            self.i += 1;
            out.push('^');
        }
        let esc = |c: char| if c.is_ascii_alphanumeric() { c.to_string() } else { format!("\\x{{{:x}}}", c as u32) };
        let mut any = false;
        loop {
            match self.s.get(self.i) {
                None | Some(b'\n') => return Err(self.err("unterminated character class")),
                Some(b']') => {
                    self.i += 1;
                    break;
                }
                _ => {
                    let a = self.char()?;
                    out += &esc(a);
                    if self.s.get(self.i) == Some(&b'-') && self.s.get(self.i + 1).is_some_and(|&c| c != b']') {
                        self.i += 1;
                        let b = self.char()?;
                        if b < a {
                            return Err(self.err("reversed range in character class"));
                        }
                        out.push('-');
                        out += &esc(b);
                    }
                    any = true;
                }
            }
        }
        if !any {
            return Err(self.err("empty character class"));
        }
        out.push(']');
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::to_lark;

    #[test]
    fn converts_llama_cpp_style_grammars() {
        let g = r#"# a list
root ::= "items:" ws item ("," ws item)* "\n"
item ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,7} | num
num  ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \t]*
"#;
        let l = to_lark(g).unwrap();
        assert_eq!(
            l,
            "start: \"items:\" ws item (\",\" ws item)* \"\\n\"\n\
             item: /[a-zA-Z\\x{5f}]/ /[a-zA-Z0-9\\x{5f}\\x{2d}]/{0,7} | num\n\
             num: \"-\"? /[0-9]/+ (\".\" /[0-9]/+)?\n\
             ws: /[\\x{20}\\x{9}]/*\n"
        );
        let multi = "root ::= (\n  \"a\" |\n  \"b\"\n) x\nx ::= \"c\" |\n  \"d\"\n";
        assert_eq!(to_lark(multi).unwrap(), "start: (\"a\" | \"b\") x\nx: \"c\" | \"d\"\n");
    }

    #[test]
    fn refuses_bad_grammars_with_a_position() {
        for (g, want) in [
            ("root = \"a\"", "expected ::="),
            ("root ::= \"a", "unterminated string"),
            ("root ::= [a-", "unterminated character class"),
            ("root ::= x", "rule `x` is used but not defined"),
            ("start ::= \"a\"", "no `root` rule"),
            ("root ::= \"a\"{3,1}", "bad repetition bounds"),
        ] {
            let e = to_lark(g).unwrap_err().to_string();
            assert!(e.contains(want), "{g:?}: {e}");
        }
    }
}
