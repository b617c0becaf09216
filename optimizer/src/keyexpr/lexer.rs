//! Tokens of key expressions: numbers, `k<i>` components, operators and
//! brackets, each with its character column for errors.

use super::ast::CmpOp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok {
    Num,
    Key,
    True,
    False,
    LBrack,
    RBrack,
    LParen,
    RParen,
    Comma,
    DotDot,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    EqEq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Bang,
    /// Any other word (an error wherever it occurs).
    Word,
    /// Any other character (an error wherever it occurs).
    Bad,
    Eof,
}

impl Tok {
    pub(super) fn cmp_op(self) -> Option<CmpOp> {
        Some(match self {
            Tok::EqEq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Token {
    pub(super) kind: Tok,
    /// 1-based character column.
    pub(super) col: usize,
    /// Byte range in the source.
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Split `src` into tokens; never fails (unknown text becomes `Word`/`Bad`
/// tokens, reported by the parser where they occur), ends with `Eof`.
pub(super) fn lex(src: &str) -> Vec<Token> {
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let byte_at = |i: usize| chars.get(i).map_or(src.len(), |&(b, _)| b);
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).map(|&(_, c)| c);
        let (kind, len) = if c.is_ascii_digit() {
            let n = chars[i..].iter().take_while(|(_, c)| c.is_ascii_digit()).count();
            (Tok::Num, n)
        } else if c.is_alphabetic() || c == '_' {
            let n = chars[i..].iter().take_while(|(_, c)| c.is_alphanumeric() || *c == '_').count();
            let word = &src[start..byte_at(i + n)];
            let kind = match word {
                "true" => Tok::True,
                "false" => Tok::False,
                w if w.len() >= 2 && w.starts_with('k') && w[1..].bytes().all(|b| b.is_ascii_digit()) => Tok::Key,
                _ => Tok::Word,
            };
            (kind, n)
        } else {
            match (c, next) {
                ('.', Some('.')) => (Tok::DotDot, 2),
                ('=', Some('=')) => (Tok::EqEq, 2),
                ('!', Some('=')) => (Tok::Ne, 2),
                ('<', Some('=')) => (Tok::Le, 2),
                ('>', Some('=')) => (Tok::Ge, 2),
                ('&', Some('&')) => (Tok::AndAnd, 2),
                ('|', Some('|')) => (Tok::OrOr, 2),
                ('<', _) => (Tok::Lt, 1),
                ('>', _) => (Tok::Gt, 1),
                ('!', _) => (Tok::Bang, 1),
                ('[', _) => (Tok::LBrack, 1),
                (']', _) => (Tok::RBrack, 1),
                ('(', _) => (Tok::LParen, 1),
                (')', _) => (Tok::RParen, 1),
                (',', _) => (Tok::Comma, 1),
                ('+', _) => (Tok::Plus, 1),
                ('-', _) => (Tok::Minus, 1),
                ('*', _) => (Tok::Star, 1),
                ('/', _) => (Tok::Slash, 1),
                ('%', _) => (Tok::Percent, 1),
                _ => (Tok::Bad, 1),
            }
        };
        toks.push(Token { kind, col: i + 1, start, end: byte_at(i + len) });
        i += len;
    }
    toks.push(Token { kind: Tok::Eof, col: chars.len() + 1, start: src.len(), end: src.len() });
    toks
}
