//! The expression's syntax: operand terms, `...`, the optional `->` output,
//! each item with its character position (for errors).

use crate::error::EinsumError;
use tra_optimizer::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    /// A letter and its position.
    Letter(char, usize),
    /// `...` and the position of its first dot.
    Ellipsis(usize),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Term {
    /// Position where the term starts (its first item, or where it would be).
    pub(crate) start: usize,
    pub(crate) items: Vec<Item>,
}

impl Term {
    pub(crate) fn letters(&self) -> usize {
        self.items.iter().filter(|i| matches!(i, Item::Letter(..))).count()
    }
    pub(crate) fn ellipsis(&self) -> Option<usize> {
        self.items.iter().find_map(|i| match i {
            Item::Ellipsis(p) => Some(*p),
            _ => None,
        })
    }
    pub(crate) fn text(&self) -> String {
        self.items
            .iter()
            .map(|i| match i {
                Item::Letter(c, _) => c.to_string(),
                Item::Ellipsis(_) => "...".into(),
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub(crate) inputs: Vec<Term>,
    pub(crate) output: Option<Term>,
    /// Position of `->`, or the length of the expression.
    pub(crate) inputs_end: usize,
}

pub(crate) fn parse(expr: &str) -> Result<Parsed, EinsumError> {
    let chars: Vec<char> = expr.chars().collect();
    let err = |pos: usize, msg: String| EinsumError::at_pos(expr, pos, ErrorCode::BadExpression, msg);
    let mut inputs = vec![Term { start: 0, items: vec![] }];
    let mut output: Option<Term> = None;
    let mut inputs_end = chars.len();
    let mut fresh_term = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let term = output.as_mut().unwrap_or_else(|| inputs.last_mut().expect("a term"));
        if fresh_term && !c.is_whitespace() {
            term.start = i;
            fresh_term = false;
        }
        match c {
            c if c.is_whitespace() => {}
            c if c.is_ascii_alphabetic() => term.items.push(Item::Letter(c, i)),
            '.' => {
                if chars[i..].iter().take(3).filter(|&&d| d == '.').count() == 3 {
                    if let Some(p) = term.ellipsis() {
                        return Err(err(i, format!("a term may hold one `...`; this one has another at position {p}")));
                    }
                    term.items.push(Item::Ellipsis(i));
                    i += 3;
                    continue;
                }
                return Err(err(i, "`.` that is not part of an ellipsis `...`".into()));
            }
            ',' if output.is_some() => {
                return Err(err(i, "the output after `->` is a single term: `,` cannot appear there".into()))
            }
            ',' => {
                inputs.push(Term { start: i + 1, items: vec![] });
                fresh_term = true;
            }
            '-' if chars.get(i + 1) == Some(&'>') => {
                if output.is_some() {
                    return Err(err(i, "`->` appears twice; an einsum has one output".into()));
                }
                inputs_end = i;
                output = Some(Term { start: i + 2, items: vec![] });
                fresh_term = true;
                i += 2;
                continue;
            }
            '-' => return Err(err(i, "`-` that is not part of `->`".into())),
            '>' => return Err(err(i, "`>` that is not part of `->`".into())),
            c => {
                return Err(err(
                    i,
                    format!("`{c}` is not an index: indices are the letters a-z and A-Z (and `...` for other axes)"),
                ))
            }
        }
        i += 1;
    }
    Ok(Parsed { inputs, output, inputs_end })
}
