//! Key expressions and predicates: a small, safe language over key components.
//!
//! A *key* ([`Key`]) is a vector of natural numbers, one `u32` per key
//! dimension; `k0`, `k1`, … name its components. Two kinds of expression are
//! written in this language:
//!
//! * a [`KeyFn`] maps one key to one or more keys: `[k0, 2*k1 + k2]`. A
//!   component may be a *range* `lo..hi`, which replicates the input key once
//!   per value in `lo..hi`: `[k0, 0..4]` maps `[7]` to `[7, 0]`, `[7, 1]`,
//!   `[7, 2]`, `[7, 3]`;
//! * a [`Predicate`] is a boolean condition on one key: `k0 == k1 && k2 < 3`.
//!
//! # Grammar
//!
//! ```text
//! keyfn     := '[' ']' | '[' component (',' component)* ','? ']' | intexpr
//!                                       (a bare intexpr means a 1-tuple)
//! component := INT '..' INT             (a range; lo < hi, both at most u32::MAX)
//!            | intexpr
//! predicate := or
//! or        := and ('||' and)*
//! and       := not ('&&' not)*
//! not       := '!' not | cmp
//! cmp       := intexpr (('=='|'!='|'<'|'<='|'>'|'>=') intexpr)?
//!            | 'true' | 'false' | '(' predicate ')'
//! intexpr   := term (('+'|'-') term)*
//! term      := unary (('*'|'/'|'%') unary)*
//! unary     := '-' unary | atom
//! atom      := INT | 'k' INT | '(' intexpr ')'
//! ```
//!
//! `INT` is a run of decimal digits (at most `i64::MAX`; negative numbers are
//! written with unary minus). `k12` is a single token: key component 12.
//! Whitespace is allowed anywhere between tokens. Comparisons do not chain
//! (`a < b < c` is an error), a predicate must be boolean (`k0 + 1` alone is an
//! error: "expected a comparison") and a key component must be an integer
//! (`[k0 == 1]` is an error). Parenthesised groups may hold either kind of
//! expression: `(k0 + 1) == k1` and `(k0 == k1) && true` both parse.
//!
//! Parse errors are [`ParseError`]s carrying the 1-based *character* column of
//! the offending token, what was expected there and what was found.
//!
//! # Semantics
//!
//! Expressions are evaluated in `i64` with checked arithmetic: an overflow is
//! an [`EvalError`], never a wrap-around. `/` and `%` are **Euclidean**
//! ([`i64::div_euclid`], [`i64::rem_euclid`]): the remainder is never negative,
//! so `-7 / 2 == -4`, `-7 % 2 == 1`, `7 / -2 == -3` and `7 % -2 == 1`. Division
//! or remainder by zero is an [`EvalError`]. Intermediate values may be
//! negative, but every component of an output key must lie in `0..=u32::MAX`.
//! Reading `ki` from a key with at most `i` components is an [`EvalError`].
//! `&&` and `||` evaluate their operands left to right and short-circuit, so
//! `k1 != 0 && k0 / k1 == 2` never divides by zero.
//!
//! A key expression with range components returns the cartesian product of the
//! range values, in lexicographic order of those values (earlier range
//! components vary slowest).
//!
//! # Canonical form
//!
//! Parentheses are not stored. A run of `+`/`-` (or of `*`/`/`/`%`) at one
//! level is stored as one n-ary node and a parenthesised sum inside a sum stays
//! a separate node, so `a + b + c` and `(a + b) + c` are different (if
//! equivalent) values: arithmetic is never reassociated, as that could move an
//! overflow. Chains of `&&` (and of `||`) are flattened, so `(a && b) && c`
//! equals `a && b && c`. Note that `!` binds looser than comparisons:
//! `!k0 == 1` is `!(k0 == 1)`, which is how it is displayed. The [`Display`](fmt::Display) form writes the minimum
//! parentheses and re-parses to an equal value: `parse(x.to_string()) == x`.
//! Serde uses this text form.
//!
//! # Limits
//!
//! Parentheses and prefix operators (`-`, `!`) may be nested at most
//! [`MAX_NESTING`] levels deep; deeper input is a [`ParseError`] ("expression
//! nested too deeply"), not a stack overflow. [`KeyFn::compose`] and
//! [`Predicate::substitute`] return `None` rather than build a value whose text
//! form would exceed that limit. (Only [`Predicate::and`] can exceed it, by one
//! level, when a conjunct is a `||` already nested [`MAX_NESTING`] deep.)

use std::collections::BTreeSet;
use std::fmt;

/// A key: one natural number per key dimension.
pub type Key = Vec<u32>;

/// How deeply parentheses and prefix operators (`-`, `!`) may nest.
pub const MAX_NESTING: usize = 256;

/// A parse error: where (1-based column) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: expected {expected}, found {found}")]
pub struct ParseError {
    /// 1-based column of the offending character.
    pub column: usize,
    /// What the parser expected there.
    pub expected: String,
    /// What it found (a token, or `end of input`).
    pub found: String,
}

/// An evaluation error (a component out of range, division by zero, a negative result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

// ---------------------------------------------------------------------------
// Abstract syntax
// ---------------------------------------------------------------------------

/// `+` or `-` in a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum AddOp {
    Add,
    Sub,
}

/// `*`, `/` or `%` in a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum MulOp {
    Mul,
    Div,
    Mod,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// An integer expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum IntExpr {
    /// A literal; never negative (negative numbers are `Neg(Lit(_))`).
    Lit(i64),
    /// Key component `ki`.
    Key(usize),
    /// Unary minus.
    Neg(Box<IntExpr>),
    /// `first op1 e1 op2 e2 …` with `+`/`-`, left to right; `rest` is non-empty.
    Sum(Box<IntExpr>, Vec<(AddOp, IntExpr)>),
    /// `first op1 e1 op2 e2 …` with `*`/`/`/`%`, left to right; `rest` is non-empty.
    Product(Box<IntExpr>, Vec<(MulOp, IntExpr)>),
}

/// One component of a key expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Component {
    /// An integer expression.
    Expr(IntExpr),
    /// A range `lo..hi` with `lo < hi`.
    Range(u32, u32),
}

/// A boolean expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum PredExpr {
    /// `true` / `false`.
    Const(bool),
    /// `l op r`.
    Cmp(CmpOp, IntExpr, IntExpr),
    /// `!e`.
    Not(Box<PredExpr>),
    /// Conjunction of at least two operands, none of them an `And`.
    And(Vec<PredExpr>),
    /// Disjunction of at least two operands, none of them an `Or`.
    Or(Vec<PredExpr>),
}

/// A key expression: `[k0, 2*k1 + k2]`; a component may be a range `0..4`
/// (one input key gives one output key per value: replication).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyFn {
    components: Vec<Component>,
}

/// A predicate over key components: `k0 == k1 && k2 < 3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Predicate {
    expr: PredExpr,
}

// ---------------------------------------------------------------------------
// Integer expressions
// ---------------------------------------------------------------------------

impl AddOp {
    fn text(self) -> &'static str {
        match self {
            AddOp::Add => " + ",
            AddOp::Sub => " - ",
        }
    }
}

impl MulOp {
    fn text(self) -> &'static str {
        match self {
            MulOp::Mul => "*",
            MulOp::Div => "/",
            MulOp::Mod => "%",
        }
    }
}

impl CmpOp {
    fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
    fn holds(self, l: i64, r: i64) -> bool {
        match self {
            CmpOp::Eq => l == r,
            CmpOp::Ne => l != r,
            CmpOp::Lt => l < r,
            CmpOp::Le => l <= r,
            CmpOp::Gt => l > r,
            CmpOp::Ge => l >= r,
        }
    }
}

fn key_out_of_range(i: usize, key: &[u32]) -> EvalError {
    EvalError(format!("k{i} is out of range for a key of arity {}", key.len()))
}

impl IntExpr {
    /// Binding strength, for parenthesisation: sum 1, product 2, negation 3, atom 4.
    fn prec(&self) -> u8 {
        match self {
            IntExpr::Sum(..) => 1,
            IntExpr::Product(..) => 2,
            IntExpr::Neg(_) => 3,
            IntExpr::Lit(_) | IntExpr::Key(_) => 4,
        }
    }

    fn eval(&self, key: &[u32]) -> Result<i64, EvalError> {
        let overflow = || EvalError(format!("arithmetic overflow in `{self}` for key {key:?}"));
        match self {
            IntExpr::Lit(v) => Ok(*v),
            IntExpr::Key(i) => key.get(*i).map(|&v| i64::from(v)).ok_or_else(|| key_out_of_range(*i, key)),
            IntExpr::Neg(e) => e.eval(key)?.checked_neg().ok_or_else(overflow),
            IntExpr::Sum(first, rest) => {
                let mut acc = first.eval(key)?;
                for (op, e) in rest {
                    let v = e.eval(key)?;
                    acc = match op {
                        AddOp::Add => acc.checked_add(v),
                        AddOp::Sub => acc.checked_sub(v),
                    }
                    .ok_or_else(overflow)?;
                }
                Ok(acc)
            }
            IntExpr::Product(first, rest) => {
                let mut acc = first.eval(key)?;
                for (op, e) in rest {
                    let v = e.eval(key)?;
                    if v == 0 && *op != MulOp::Mul {
                        return Err(EvalError(format!("division by zero in `{self}` for key {key:?}")));
                    }
                    acc = match op {
                        MulOp::Mul => acc.checked_mul(v),
                        MulOp::Div => acc.checked_div_euclid(v),
                        MulOp::Mod => acc.checked_rem_euclid(v),
                    }
                    .ok_or_else(overflow)?;
                }
                Ok(acc)
            }
        }
    }

    /// The direct operands of this node.
    fn children(&self) -> Vec<&IntExpr> {
        match self {
            IntExpr::Lit(_) | IntExpr::Key(_) => Vec::new(),
            IntExpr::Neg(e) => vec![e],
            IntExpr::Sum(first, rest) => std::iter::once(&**first).chain(rest.iter().map(|(_, e)| e)).collect(),
            IntExpr::Product(first, rest) => std::iter::once(&**first).chain(rest.iter().map(|(_, e)| e)).collect(),
        }
    }

    fn collect_dims(&self, out: &mut BTreeSet<usize>) {
        if let IntExpr::Key(i) = self {
            out.insert(*i);
        }
        for c in self.children() {
            c.collect_dims(out);
        }
    }

    /// Replace every `ki` by `f(i)`; `None` when `f` does.
    fn subst(&self, f: &dyn Fn(usize) -> Option<IntExpr>) -> Option<IntExpr> {
        Some(match self {
            IntExpr::Lit(v) => IntExpr::Lit(*v),
            IntExpr::Key(i) => f(*i)?,
            IntExpr::Neg(e) => IntExpr::Neg(Box::new(e.subst(f)?)),
            IntExpr::Sum(first, rest) => IntExpr::Sum(
                Box::new(first.subst(f)?),
                rest.iter().map(|(op, e)| Some((*op, e.subst(f)?))).collect::<Option<_>>()?,
            ),
            IntExpr::Product(first, rest) => IntExpr::Product(
                Box::new(first.subst(f)?),
                rest.iter().map(|(op, e)| Some((*op, e.subst(f)?))).collect::<Option<_>>()?,
            ),
        })
    }

    fn remap(&self, f: &dyn Fn(usize) -> usize) -> IntExpr {
        self.subst(&|i| Some(IntExpr::Key(f(i)))).expect("renaming never fails")
    }

    /// Whether `child`, an operand of `self`, is written in parentheses.
    fn parenthesises(&self, child: &IntExpr) -> bool {
        match self {
            IntExpr::Sum(..) => child.prec() <= 1,
            IntExpr::Product(..) | IntExpr::Neg(_) => child.prec() <= 2,
            IntExpr::Lit(_) | IntExpr::Key(_) => false,
        }
    }

    /// The deepest nesting of parentheses and prefix operators in the text form
    /// (what the parser counts against [`MAX_NESTING`]).
    fn nesting(&self) -> usize {
        let own = usize::from(matches!(self, IntExpr::Neg(_)));
        own + self.children().into_iter().map(|c| usize::from(self.parenthesises(c)) + c.nesting()).max().unwrap_or(0)
    }

    fn write_child(&self, f: &mut fmt::Formatter<'_>, child: &IntExpr) -> fmt::Result {
        if self.parenthesises(child) {
            write!(f, "({child})")
        } else {
            write!(f, "{child}")
        }
    }
}

impl fmt::Display for IntExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntExpr::Lit(v) => write!(f, "{v}"),
            IntExpr::Key(i) => write!(f, "k{i}"),
            IntExpr::Neg(e) => {
                f.write_str("-")?;
                self.write_child(f, e)
            }
            IntExpr::Sum(first, rest) => {
                self.write_child(f, first)?;
                for (op, e) in rest {
                    f.write_str(op.text())?;
                    self.write_child(f, e)?;
                }
                Ok(())
            }
            IntExpr::Product(first, rest) => {
                self.write_child(f, first)?;
                for (op, e) in rest {
                    f.write_str(op.text())?;
                    self.write_child(f, e)?;
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Boolean expressions
// ---------------------------------------------------------------------------

/// `items` joined by `&&`, flattening nested conjunctions.
fn mk_and(items: Vec<PredExpr>) -> PredExpr {
    let mut flat = Vec::with_capacity(items.len());
    for item in items {
        match item {
            PredExpr::And(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    match flat.len() {
        0 => PredExpr::Const(true),
        1 => flat.pop().expect("one item"),
        _ => PredExpr::And(flat),
    }
}

/// `items` joined by `||`, flattening nested disjunctions.
fn mk_or(items: Vec<PredExpr>) -> PredExpr {
    let mut flat = Vec::with_capacity(items.len());
    for item in items {
        match item {
            PredExpr::Or(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    match flat.len() {
        0 => PredExpr::Const(false),
        1 => flat.pop().expect("one item"),
        _ => PredExpr::Or(flat),
    }
}

impl PredExpr {
    fn eval(&self, key: &[u32]) -> Result<bool, EvalError> {
        Ok(match self {
            PredExpr::Const(b) => *b,
            PredExpr::Cmp(op, l, r) => op.holds(l.eval(key)?, r.eval(key)?),
            PredExpr::Not(e) => !e.eval(key)?,
            PredExpr::And(items) => {
                for item in items {
                    if !item.eval(key)? {
                        return Ok(false);
                    }
                }
                true
            }
            PredExpr::Or(items) => {
                for item in items {
                    if item.eval(key)? {
                        return Ok(true);
                    }
                }
                false
            }
        })
    }

    fn collect_dims(&self, out: &mut BTreeSet<usize>) {
        match self {
            PredExpr::Const(_) => {}
            PredExpr::Cmp(_, l, r) => {
                l.collect_dims(out);
                r.collect_dims(out);
            }
            PredExpr::Not(e) => e.collect_dims(out),
            PredExpr::And(items) | PredExpr::Or(items) => items.iter().for_each(|i| i.collect_dims(out)),
        }
    }

    /// Apply `g` to both sides of every comparison.
    fn map_ints(&self, g: &dyn Fn(&IntExpr) -> Option<IntExpr>) -> Option<PredExpr> {
        Some(match self {
            PredExpr::Const(b) => PredExpr::Const(*b),
            PredExpr::Cmp(op, l, r) => PredExpr::Cmp(*op, g(l)?, g(r)?),
            PredExpr::Not(e) => PredExpr::Not(Box::new(e.map_ints(g)?)),
            PredExpr::And(items) => PredExpr::And(items.iter().map(|i| i.map_ints(g)).collect::<Option<_>>()?),
            PredExpr::Or(items) => PredExpr::Or(items.iter().map(|i| i.map_ints(g)).collect::<Option<_>>()?),
        })
    }

    /// Whether `child`, an operand of `self`, is written in parentheses.
    /// (`!` parenthesises a comparison for readability: `!(k0 < 3)`.)
    fn parenthesises(&self, child: &PredExpr) -> bool {
        match self {
            PredExpr::Or(_) => matches!(child, PredExpr::Or(_)),
            PredExpr::And(_) => matches!(child, PredExpr::Or(_) | PredExpr::And(_)),
            PredExpr::Not(_) => matches!(child, PredExpr::Cmp(..) | PredExpr::Or(_) | PredExpr::And(_)),
            PredExpr::Const(_) | PredExpr::Cmp(..) => false,
        }
    }

    /// See [`IntExpr::nesting`].
    fn nesting(&self) -> usize {
        let with_paren = |c: &PredExpr| usize::from(self.parenthesises(c)) + c.nesting();
        match self {
            PredExpr::Const(_) => 0,
            PredExpr::Cmp(_, l, r) => l.nesting().max(r.nesting()),
            PredExpr::Not(e) => 1 + with_paren(e),
            PredExpr::And(items) | PredExpr::Or(items) => items.iter().map(with_paren).max().unwrap_or(0),
        }
    }

    fn write_child(&self, f: &mut fmt::Formatter<'_>, child: &PredExpr) -> fmt::Result {
        if self.parenthesises(child) {
            write!(f, "({child})")
        } else {
            write!(f, "{child}")
        }
    }
}

impl fmt::Display for PredExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PredExpr::Const(b) => write!(f, "{b}"),
            PredExpr::Cmp(op, l, r) => write!(f, "{l} {} {r}", op.text()),
            PredExpr::Not(e) => {
                f.write_str("!")?;
                self.write_child(f, e)
            }
            PredExpr::And(items) | PredExpr::Or(items) => {
                let sep = if matches!(self, PredExpr::And(_)) { " && " } else { " || " };
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        f.write_str(sep)?;
                    }
                    self.write_child(f, item)?;
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
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
    fn cmp_op(self) -> Option<CmpOp> {
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
struct Token {
    kind: Tok,
    /// 1-based character column.
    col: usize,
    /// Byte range in the source.
    start: usize,
    end: usize,
}

/// Split `src` into tokens; never fails (unknown text becomes `Word`/`Bad`
/// tokens, reported by the parser where they occur), ends with `Eof`.
fn lex(src: &str) -> Vec<Token> {
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

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

/// Where an integer expression must start.
const INT_START: &str = "a number, a key component like k0, or (";
/// Where a predicate operand may start.
const PRED_START: &str = "a number, a key component like k0, true, false, !, or (";
/// An integer expression where a boolean one is needed.
const NEED_BOOL: &str = "a comparison (like k0 == 1), true or false";
/// A boolean expression where an integer one is needed.
const NEED_INT: &str = "an integer expression";
/// After an integer operand of a predicate.
const CMP_OPS: &str = "a comparison operator (==, !=, <, <=, >, >=)";

/// Errors are boxed (and values in [`Val`] too) to keep the recursive
/// parsing functions' stack frames small.
type PResult<T> = Result<T, Box<ParseError>>;

/// A parsed expression of either type, with its token span (for messages).
struct Node {
    val: Val,
    /// Index of its first token.
    first: usize,
    /// Index one past its last token.
    end: usize,
}

enum Val {
    Int(Box<IntExpr>),
    Bool(Box<PredExpr>),
}

/// Binary operators, with their precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Cmp(CmpOp),
    Add(AddOp),
    Mul(MulOp),
}

const PREC_OR: u8 = 1;
const PREC_AND: u8 = 2;
const PREC_CMP: u8 = 3;
const PREC_ADD: u8 = 4;
const PREC_MUL: u8 = 5;
const PREC_UNARY: u8 = 6;

impl BinOp {
    fn prec(self) -> u8 {
        match self {
            BinOp::Or => PREC_OR,
            BinOp::And => PREC_AND,
            BinOp::Cmp(_) => PREC_CMP,
            BinOp::Add(_) => PREC_ADD,
            BinOp::Mul(_) => PREC_MUL,
        }
    }
}

/// An operator chain being parsed: `args[0] ops[0] args[1] ops[1] …`, all
/// operators of precedence `prec`, waiting for its last operand.
struct Chain {
    prec: u8,
    /// Token index of the first operand.
    first: usize,
    ops: Vec<BinOp>,
    /// Type-checked operands.
    args: Vec<Val>,
}

/// Operator-precedence parsing of one expression grammar holding both integer
/// and boolean expressions; types are checked as operators take their
/// operands, which resolves `(k0 + 1) == k1` versus `(k0 == k1)` without
/// backtracking.
struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    /// Current nesting of parentheses and prefix operators.
    nesting: usize,
    /// Parsing a predicate (booleans allowed) rather than a key expression.
    predicate: bool,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str, predicate: bool) -> Self {
        Parser { src, toks: lex(src), pos: 0, nesting: 0, predicate }
    }

    fn peek(&self) -> Tok {
        self.toks[self.pos].kind
    }

    fn peek2(&self) -> Tok {
        self.toks[(self.pos + 1).min(self.toks.len() - 1)].kind
    }

    /// Consume the current token (never past `Eof`); returns its index.
    fn bump(&mut self) -> usize {
        let i = self.pos;
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        i
    }

    fn tok_text(&self, idx: usize) -> &'a str {
        let t = self.toks[idx];
        &self.src[t.start..t.end]
    }

    /// Source text of tokens `first..end`.
    fn span_text(&self, first: usize, end: usize) -> &'a str {
        if end <= first {
            return "";
        }
        &self.src[self.toks[first].start..self.toks[end - 1].end]
    }

    fn found(&self, idx: usize) -> String {
        if self.toks[idx].kind == Tok::Eof {
            "end of input".to_string()
        } else {
            self.tok_text(idx).to_string()
        }
    }

    // Error paths are kept out of line so that the recursive parsing functions
    // have small stack frames.
    #[cold]
    #[inline(never)]
    fn err_at(&self, idx: usize, expected: &str, found: &str) -> Box<ParseError> {
        Box::new(ParseError { column: self.toks[idx].col, expected: expected.to_string(), found: found.to_string() })
    }

    /// The current token is not `expected`.
    #[cold]
    #[inline(never)]
    fn unexpected(&self, expected: &str) -> Box<ParseError> {
        self.err_at(self.pos, expected, &self.found(self.pos))
    }

    /// The current token, which follows a complete expression, is not
    /// `expected`; adds a hint for common mistakes.
    #[cold]
    #[inline(never)]
    fn unexpected_after(&self, expected: &str) -> Box<ParseError> {
        let text = self.tok_text(self.pos);
        let hint = match self.peek() {
            t if t.cmp_op().is_some() && self.predicate => " (comparisons do not chain: write a < b && b < c)",
            t if !self.predicate && (t.cmp_op().is_some() || matches!(t, Tok::AndAnd | Tok::OrOr)) => {
                " (a key component is an integer expression; comparisons belong in predicates)"
            }
            Tok::DotDot => " (a range component is written lo..hi with plain numbers, inside [ ])",
            Tok::Bad if text == "=" => " (write == to compare)",
            Tok::Bad if text == "&" => " (write && for `and`)",
            Tok::Bad if text == "|" => " (write || for `or`)",
            _ => "",
        };
        self.err_at(self.pos, &format!("{expected}{hint}"), &self.found(self.pos))
    }

    /// Consume a `kind` token that follows a complete expression.
    #[inline(never)]
    fn expect_after(&mut self, kind: Tok, expected: &str) -> PResult<usize> {
        if self.peek() == kind {
            Ok(self.bump())
        } else {
            Err(self.unexpected_after(expected))
        }
    }

    /// Enter one level of nesting at the current token.
    fn enter(&mut self) -> PResult<()> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.too_deep());
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn too_deep(&self) -> Box<ParseError> {
        self.err_at(
            self.pos,
            &format!("at most {MAX_NESTING} levels of nesting"),
            &format!("`{}`: expression nested too deeply (more than {MAX_NESTING} levels)", self.tok_text(self.pos)),
        )
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    #[inline(never)]
    fn need_int(&self, node: Node) -> PResult<IntExpr> {
        match node.val {
            Val::Int(e) => Ok(*e),
            Val::Bool(_) => Err(self.type_error(node.first, node.end, NEED_INT, "the condition")),
        }
    }

    /// `node` must be boolean; called right after it was parsed.
    #[inline(never)]
    fn need_bool(&self, node: Node) -> PResult<PredExpr> {
        match node.val {
            Val::Bool(e) => Ok(*e),
            Val::Int(_) => {
                if !matches!(self.peek(), Tok::Eof | Tok::AndAnd | Tok::OrOr | Tok::RParen) {
                    // `k0 = 1`, `k0 k1`: the comparison operator is what is missing.
                    return Err(self.unexpected_after(CMP_OPS));
                }
                Err(self.type_error(node.first, node.end, NEED_BOOL, "the integer expression"))
            }
        }
    }

    /// The expression in tokens `first..end` has the wrong type.
    #[cold]
    #[inline(never)]
    fn type_error(&self, first: usize, end: usize, expected: &str, what: &str) -> Box<ParseError> {
        self.err_at(first, expected, &format!("{what} `{}`", self.span_text(first, end)))
    }

    /// The binary operator at the current token, if any (only arithmetic when
    /// parsing a key expression).
    #[inline(never)]
    fn binop(&self) -> Option<BinOp> {
        let t = self.peek();
        Some(match t {
            Tok::Plus => BinOp::Add(AddOp::Add),
            Tok::Minus => BinOp::Add(AddOp::Sub),
            Tok::Star => BinOp::Mul(MulOp::Mul),
            Tok::Slash => BinOp::Mul(MulOp::Div),
            Tok::Percent => BinOp::Mul(MulOp::Mod),
            _ if !self.predicate => return None,
            Tok::OrOr => BinOp::Or,
            Tok::AndAnd => BinOp::And,
            _ => BinOp::Cmp(t.cmp_op()?),
        })
    }

    /// Type-check an operand of an operator of precedence `prec`.
    #[inline(never)]
    fn operand(&self, prec: u8, node: Node) -> PResult<Val> {
        Ok(if prec <= PREC_AND {
            Val::Bool(Box::new(self.need_bool(node)?))
        } else {
            Val::Int(Box::new(self.need_int(node)?))
        })
    }

    /// Parse an expression whose binary operators all bind at least as tightly
    /// as `min`. Binary operators are handled iteratively (a stack of pending
    /// operator chains of strictly increasing precedence), so only parentheses
    /// and prefix operators recurse.
    fn parse_expr(&mut self, min: u8) -> PResult<Node> {
        let mut cur = self.parse_prefix(min)?;
        let mut chains: Vec<Chain> = Vec::new();
        while let Some(op) = self.binop().filter(|op| op.prec() >= min) {
            let prec = op.prec();
            while chains.last().is_some_and(|c| c.prec > prec) {
                let chain = chains.pop().expect("non-empty");
                cur = self.close(chain, cur)?;
            }
            match chains.last_mut() {
                Some(chain) if chain.prec == prec => {
                    if prec == PREC_CMP {
                        return Err(self.unexpected_after("`&&` or `||`"));
                    }
                    chain.args.push(self.operand(prec, cur)?);
                    chain.ops.push(op);
                }
                _ => {
                    let first = cur.first;
                    let arg = self.operand(prec, cur)?;
                    chains.push(Chain { prec, first, ops: vec![op], args: vec![arg] });
                }
            }
            self.bump();
            cur = self.parse_prefix(prec + 1)?;
        }
        while let Some(chain) = chains.pop() {
            cur = self.close(chain, cur)?;
        }
        Ok(cur)
    }

    /// Finish an operator chain with its last operand.
    #[inline(never)]
    fn close(&self, chain: Chain, last: Node) -> PResult<Node> {
        let Chain { prec, first, ops, mut args } = chain;
        args.push(self.operand(prec, last)?);
        let val = if prec <= PREC_AND {
            let items = args
                .into_iter()
                .map(|a| match a {
                    Val::Bool(b) => *b,
                    Val::Int(_) => unreachable!("operands are type-checked"),
                })
                .collect();
            Val::Bool(Box::new(if prec == PREC_OR { mk_or(items) } else { mk_and(items) }))
        } else {
            let mut ints = args.into_iter().map(|a| match a {
                Val::Int(e) => *e,
                Val::Bool(_) => unreachable!("operands are type-checked"),
            });
            let head = ints.next().expect("a chain has operands");
            match ops[0] {
                BinOp::Cmp(op) => Val::Bool(Box::new(PredExpr::Cmp(op, head, ints.next().expect("two operands")))),
                BinOp::Add(_) => Val::Int(Box::new(IntExpr::Sum(
                    Box::new(head),
                    ops.iter()
                        .zip(ints)
                        .map(|(op, e)| match op {
                            BinOp::Add(op) => (*op, e),
                            _ => unreachable!("one precedence per chain"),
                        })
                        .collect(),
                ))),
                BinOp::Mul(_) => Val::Int(Box::new(IntExpr::Product(
                    Box::new(head),
                    ops.iter()
                        .zip(ints)
                        .map(|(op, e)| match op {
                            BinOp::Mul(op) => (*op, e),
                            _ => unreachable!("one precedence per chain"),
                        })
                        .collect(),
                ))),
                BinOp::Or | BinOp::And => unreachable!("boolean chains are handled above"),
            }
        };
        Ok(Node { val, first, end: self.pos })
    }

    /// A prefix operator application or an atom. `min` is the precedence
    /// context: `!` may start an operand only where a `not` may (`min <=
    /// PREC_CMP`); it also picks the error message.
    fn parse_prefix(&mut self, min: u8) -> PResult<Node> {
        let start = self.pos;
        let val = match self.peek() {
            Tok::Bang if self.predicate && min <= PREC_CMP => {
                self.enter()?;
                self.bump();
                let inner = self.parse_expr(PREC_CMP)?;
                let e = self.need_bool(inner)?;
                self.leave();
                Val::Bool(Box::new(PredExpr::Not(Box::new(e))))
            }
            Tok::Minus => {
                self.enter()?;
                self.bump();
                let inner = self.parse_prefix(PREC_UNARY)?;
                let e = self.need_int(inner)?;
                self.leave();
                Val::Int(Box::new(IntExpr::Neg(Box::new(e))))
            }
            Tok::LParen => {
                self.enter()?;
                self.bump();
                let inner = self.parse_expr(if self.predicate { PREC_OR } else { PREC_ADD })?;
                self.expect_after(Tok::RParen, "`)`")?;
                self.leave();
                inner.val
            }
            _ => return self.parse_leaf(min),
        };
        Ok(Node { val, first: start, end: self.pos })
    }

    /// A number, a key component, `true` or `false`.
    #[inline(never)]
    fn parse_leaf(&mut self, min: u8) -> PResult<Node> {
        let start = self.pos;
        let val = match self.peek() {
            Tok::Num => {
                let text = self.tok_text(start);
                let v = text
                    .parse::<i64>()
                    .map_err(|_| self.err_at(start, &format!("a number no larger than {}", i64::MAX), text))?;
                self.bump();
                Val::Int(Box::new(IntExpr::Lit(v)))
            }
            Tok::Key => {
                let text = self.tok_text(start);
                let i = text[1..].parse::<usize>().map_err(|_| {
                    self.err_at(start, &format!("a key component index no larger than {}", usize::MAX), text)
                })?;
                self.bump();
                Val::Int(Box::new(IntExpr::Key(i)))
            }
            Tok::True | Tok::False if self.predicate => {
                let b = self.peek() == Tok::True;
                self.bump();
                Val::Bool(Box::new(PredExpr::Const(b)))
            }
            _ => return Err(self.unexpected(if self.predicate && min <= PREC_CMP { PRED_START } else { INT_START })),
        };
        Ok(Node { val, first: start, end: self.pos })
    }

    /// `INT '..' INT` (the caller saw `Num DotDot`) or an integer expression.
    fn parse_component(&mut self) -> PResult<Component> {
        if self.peek() == Tok::Num && self.peek2() == Tok::DotDot {
            let lo_idx = self.bump();
            self.bump();
            if self.peek() != Tok::Num {
                return Err(self.unexpected("a number (the end of the range)"));
            }
            let hi_idx = self.bump();
            let bound = |idx: usize| {
                let text = self.tok_text(idx);
                text.parse::<u32>()
                    .map_err(|_| self.err_at(idx, &format!("a range bound no larger than {}", u32::MAX), text))
            };
            let (lo, hi) = (bound(lo_idx)?, bound(hi_idx)?);
            if lo >= hi {
                return Err(self.err_at(
                    lo_idx,
                    "a non-empty range (its start must be smaller than its end)",
                    self.span_text(lo_idx, self.pos),
                ));
            }
            return Ok(Component::Range(lo, hi));
        }
        let n = self.parse_expr(PREC_ADD)?;
        Ok(Component::Expr(self.need_int(n)?))
    }

    fn parse_keyfn(&mut self) -> PResult<KeyFn> {
        if self.peek() != Tok::LBrack {
            if !matches!(self.peek(), Tok::Num | Tok::Key | Tok::LParen | Tok::Minus) {
                return Err(self.unexpected("a key expression like [k0, k1]"));
            }
            let n = self.parse_expr(PREC_ADD)?;
            let e = self.need_int(n)?;
            if self.peek() == Tok::Comma {
                return Err(self
                    .unexpected("end of input (a key with several components is written in brackets, like [k0, k1])"));
            }
            self.expect_after(Tok::Eof, "end of input")?;
            return Ok(KeyFn { components: vec![Component::Expr(e)] });
        }
        self.bump();
        let mut components = Vec::new();
        while self.peek() != Tok::RBrack {
            components.push(self.parse_component()?);
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RBrack => {}
                _ => return Err(self.unexpected_after("`,` or `]`")),
            }
        }
        self.bump();
        self.expect_after(Tok::Eof, "end of input")?;
        Ok(KeyFn { components })
    }

    fn parse_predicate(&mut self) -> PResult<Predicate> {
        let n = self.parse_expr(PREC_OR)?;
        if matches!(n.val, Val::Bool(_)) && self.peek() != Tok::Eof {
            return Err(self.unexpected_after("`&&`, `||` or end of input"));
        }
        let expr = self.need_bool(n)?;
        Ok(Predicate { expr })
    }
}

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

impl KeyFn {
    /// Parse `[e, e, ...]`, a bare single expression `e`, or `[]`.
    pub fn parse(src: &str) -> Result<KeyFn, ParseError> {
        Parser::new(src, false).parse_keyfn().map_err(|e| *e)
    }
    /// `[k0, ..., k{arity-1}]`.
    pub fn identity(arity: usize) -> KeyFn {
        KeyFn { components: (0..arity).map(|i| Component::Expr(IntExpr::Key(i))).collect() }
    }
    /// Identity with a range component `0..n` inserted at position `dim`.
    ///
    /// # Panics
    /// When `dim > arity` or `n == 0` (an empty range is not a key expression).
    pub fn replicate(arity: usize, dim: usize, n: u32) -> KeyFn {
        assert!(dim <= arity, "KeyFn::replicate: dim {dim} is beyond arity {arity}");
        assert!(n > 0, "KeyFn::replicate: the range 0..0 is empty");
        let mut k = KeyFn::identity(arity);
        k.components.insert(dim, Component::Range(0, n));
        k
    }
    /// Number of components of each output key.
    pub fn output_arity(&self) -> usize {
        self.components.len()
    }
    /// The key components `ki` the expression reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for c in &self.components {
            if let Component::Expr(e) = c {
                e.collect_dims(&mut out);
            }
        }
        out
    }
    /// Output keys per input key (product of the range lengths; 1 without ranges).
    /// Saturates at `u64::MAX`.
    pub fn fanout(&self) -> u64 {
        self.components
            .iter()
            .map(|c| match c {
                Component::Range(lo, hi) => u64::from(hi - lo),
                Component::Expr(_) => 1,
            })
            .fold(1u64, u64::saturating_mul)
    }
    /// Per output component, `Some((lo, hi))` when it is a range `lo..hi`.
    pub fn ranges(&self) -> Vec<Option<(u32, u32)>> {
        self.components
            .iter()
            .map(|c| match c {
                Component::Range(lo, hi) => Some((*lo, *hi)),
                Component::Expr(_) => None,
            })
            .collect()
    }
    /// Whether some component is a range.
    pub fn has_ranges(&self) -> bool {
        self.components.iter().any(|c| matches!(c, Component::Range(..)))
    }
    /// The output keys for one input key, ranges enumerated in lexicographic order.
    pub fn eval(&self, key: &[u32]) -> Result<Vec<Key>, EvalError> {
        // Evaluate the expressions first: they do not depend on range values.
        let mut values = Vec::with_capacity(self.components.len());
        for (pos, c) in self.components.iter().enumerate() {
            values.push(match c {
                Component::Range(..) => None,
                Component::Expr(e) => {
                    let v = e.eval(key)?;
                    let v = u32::try_from(v).map_err(|_| {
                        let why = if v < 0 {
                            "key components must be natural numbers".to_string()
                        } else {
                            format!("key components must be at most {}", u32::MAX)
                        };
                        EvalError(format!("component {pos} of `{self}` is {v} for key {key:?}: {why}"))
                    })?;
                    Some(v)
                }
            });
        }
        let mut out: Vec<Key> = vec![Vec::with_capacity(self.components.len())];
        for (c, v) in self.components.iter().zip(values) {
            match (c, v) {
                (_, Some(v)) => out.iter_mut().for_each(|k| k.push(v)),
                (Component::Range(lo, hi), None) => {
                    out = out
                        .into_iter()
                        .flat_map(|k| {
                            (*lo..*hi).map(move |r| {
                                let mut k = k.clone();
                                k.push(r);
                                k
                            })
                        })
                        .collect();
                }
                (Component::Expr(_), None) => unreachable!("expressions were evaluated"),
            }
        }
        Ok(out)
    }
    /// True when this is `[k0, ..., k{arity-1}]`.
    pub fn is_identity(&self, arity: usize) -> bool {
        self.components.len() == arity
            && self.components.iter().enumerate().all(|(i, c)| *c == Component::Expr(IntExpr::Key(i)))
    }
    /// Per output component, `Some(i)` when it is exactly `ki`.
    pub fn passthrough(&self) -> Vec<Option<usize>> {
        self.components
            .iter()
            .map(|c| match c {
                Component::Expr(IntExpr::Key(i)) => Some(*i),
                _ => None,
            })
            .collect()
    }
    /// `self ∘ inner`, when it can be written as one key expression.
    ///
    /// The result applies `inner` first, then `self`: `inner`'s component
    /// expressions are substituted for `self`'s `ki`. `None` when `self` reads a
    /// component `inner` does not produce; when a range component of `inner` is
    /// not read by `self` exactly once, as a bare `ki` component (it then stays
    /// a range at that position; dropping it would produce duplicates, using it
    /// in arithmetic or twice cannot be written as ranges); or when the result
    /// would nest more than [`MAX_NESTING`] levels deep.
    ///
    /// The result yields the same keys as the two steps, as a multiset (their
    /// order differs when ranges are permuted). It may succeed on an input
    /// where the two steps fail because an intermediate component of `inner`
    /// is negative or too large: intermediate values are no longer checked.
    pub fn compose(&self, inner: &KeyFn) -> Option<KeyFn> {
        let mut range_uses = vec![0usize; inner.components.len()];
        let mut components = Vec::with_capacity(self.components.len());
        for c in &self.components {
            components.push(match c {
                Component::Range(lo, hi) => Component::Range(*lo, *hi),
                Component::Expr(IntExpr::Key(i)) => {
                    let ic = inner.components.get(*i)?;
                    if let Component::Range(..) = ic {
                        range_uses[*i] += 1;
                    }
                    ic.clone()
                }
                Component::Expr(e) => Component::Expr(e.subst(&|i| match inner.components.get(i)? {
                    Component::Expr(ie) => Some(ie.clone()),
                    Component::Range(..) => None,
                })?),
            });
        }
        let ranges_ok =
            inner.components.iter().zip(&range_uses).all(|(c, &uses)| !matches!(c, Component::Range(..)) || uses == 1);
        let k = KeyFn { components };
        (ranges_ok && k.nesting() <= MAX_NESTING).then_some(k)
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, f: &dyn Fn(usize) -> usize) -> KeyFn {
        KeyFn {
            components: self
                .components
                .iter()
                .map(|c| match c {
                    Component::Expr(e) => Component::Expr(e.remap(f)),
                    Component::Range(lo, hi) => Component::Range(*lo, *hi),
                })
                .collect(),
        }
    }

    fn nesting(&self) -> usize {
        self.components
            .iter()
            .map(|c| match c {
                Component::Expr(e) => e.nesting(),
                Component::Range(..) => 0,
            })
            .max()
            .unwrap_or(0)
    }
}

impl Predicate {
    /// Parse a boolean expression.
    pub fn parse(src: &str) -> Result<Predicate, ParseError> {
        Parser::new(src, true).parse_predicate().map_err(|e| *e)
    }
    /// `true`.
    pub fn always() -> Predicate {
        Predicate { expr: PredExpr::Const(true) }
    }
    /// True when this is literally `true`.
    pub fn is_always(&self) -> bool {
        self.expr == PredExpr::Const(true)
    }
    /// Evaluate on a key.
    pub fn eval(&self, key: &[u32]) -> Result<bool, EvalError> {
        self.expr.eval(key)
    }
    /// The key components `ki` the predicate reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        self.expr.collect_dims(&mut out);
        out
    }
    /// `self && other`.
    ///
    /// `true && p` and `p && true` simplify to `p`; nested conjunctions are
    /// flattened.
    pub fn and(&self, other: &Predicate) -> Predicate {
        if self.is_always() {
            return other.clone();
        }
        if other.is_always() {
            return self.clone();
        }
        // Idempotent: conjuncts already present are not repeated, so that
        // merging a filter with an equal one (R1-1) cannot grow forever.
        let mut items = match mk_and(vec![self.expr.clone()]) {
            PredExpr::And(v) => v,
            e => vec![e],
        };
        let others = match mk_and(vec![other.expr.clone()]) {
            PredExpr::And(v) => v,
            e => vec![e],
        };
        for o in others {
            if !items.contains(&o) {
                items.push(o);
            }
        }
        Predicate { expr: mk_and(items) }
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, f: &dyn Fn(usize) -> usize) -> Predicate {
        Predicate { expr: self.expr.map_ints(&|e| Some(e.remap(f))).expect("renaming never fails") }
    }
    /// The predicate read through a key map: `p(f(k))`, when `f` has no ranges.
    ///
    /// `None` also when `self` reads a component beyond `f`'s output arity, or
    /// when the result would nest more than [`MAX_NESTING`] levels deep. As with
    /// [`KeyFn::compose`], intermediate key components are no longer checked
    /// to be natural numbers.
    pub fn substitute(&self, f: &KeyFn) -> Option<Predicate> {
        let exprs = f
            .components
            .iter()
            .map(|c| match c {
                Component::Expr(e) => Some(e),
                Component::Range(..) => None,
            })
            .collect::<Option<Vec<&IntExpr>>>()?;
        let sub = |i: usize| exprs.get(i).map(|e| (*e).clone());
        let expr = self.expr.map_ints(&|e| e.subst(&sub))?;
        (expr.nesting() <= MAX_NESTING).then_some(Predicate { expr })
    }
}

impl fmt::Display for KeyFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (n, c) in self.components.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            match c {
                Component::Expr(e) => write!(f, "{e}")?,
                Component::Range(lo, hi) => write!(f, "{lo}..{hi}")?,
            }
        }
        f.write_str("]")
    }
}
impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.expr)
    }
}

impl serde::Serialize for KeyFn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
impl<'de> serde::Deserialize<'de> for KeyFn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        KeyFn::parse(&s).map_err(|e| serde::de::Error::custom(format!("bad key expression `{s}`: {e}")))
    }
}
impl serde::Serialize for Predicate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
impl<'de> serde::Deserialize<'de> for Predicate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Predicate::parse(&s).map_err(|e| serde::de::Error::custom(format!("bad predicate `{s}`: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(s: &str) -> KeyFn {
        KeyFn::parse(s).unwrap_or_else(|e| panic!("`{s}`: {e}"))
    }
    fn p(s: &str) -> Predicate {
        Predicate::parse(s).unwrap_or_else(|e| panic!("`{s}`: {e}"))
    }
    fn kerr(s: &str) -> ParseError {
        KeyFn::parse(s).expect_err(s)
    }
    fn perr(s: &str) -> ParseError {
        Predicate::parse(s).expect_err(s)
    }
    fn pe(column: usize, expected: &str, found: &str) -> ParseError {
        ParseError { column, expected: expected.into(), found: found.into() }
    }

    #[test]
    fn parse_and_eval_key_expressions() {
        let f = k("[k0]");
        assert_eq!(f.eval(&[3, 4]).unwrap(), vec![vec![3]]);
        assert_eq!(f.to_string(), "[k0]");
        assert!(f.is_identity(1));
        assert!(!f.is_identity(2));
        assert_eq!(f.passthrough(), vec![Some(0)]);
        assert_eq!(f.fanout(), 1);

        let f = k("[2*k0 + k1]");
        assert_eq!(f.eval(&[3, 4]).unwrap(), vec![vec![10]]);
        assert_eq!(f.to_string(), "[2*k0 + k1]");
        assert_eq!(f.dims_read(), BTreeSet::from([0, 1]));
        assert_eq!(f.passthrough(), vec![None]);
        assert_eq!(f.output_arity(), 1);
        // A bare expression is a 1-tuple; whitespace and parentheses are not kept.
        assert_eq!(k(" 2 * k0+k1 "), f);
        assert_eq!(k("[((2)*(k0)) + k1]"), f);

        let f = k("[k0, k1, 0..4]");
        assert_eq!(f.eval(&[1, 2]).unwrap(), vec![vec![1, 2, 0], vec![1, 2, 1], vec![1, 2, 2], vec![1, 2, 3]]);
        assert_eq!(f.fanout(), 4);
        assert_eq!(f.output_arity(), 3);
        assert_eq!(f.passthrough(), vec![Some(0), Some(1), None]);
        assert!(f.has_ranges());
        assert_eq!(f.to_string(), "[k0, k1, 0..4]");

        assert_eq!(k("[k0, 0..2, k1]").eval(&[5, 7]).unwrap(), vec![vec![5, 0, 7], vec![5, 1, 7]]);
        assert_eq!(k("[0..2, 3..5]").eval(&[]).unwrap(), vec![vec![0, 3], vec![0, 4], vec![1, 3], vec![1, 4]]);
        assert_eq!(k("[1..3, k0, 0..3]").fanout(), 6);

        let empty = k("[]");
        assert_eq!(empty.output_arity(), 0);
        assert_eq!(empty.eval(&[9]).unwrap(), vec![Vec::<u32>::new()]);
        assert!(empty.is_identity(0));
        assert_eq!(empty.to_string(), "[]");
        assert_eq!(k("[ k0 , k1 , ]"), k("[k0, k1]"));
        assert_eq!(k("[k12]").dims_read(), BTreeSet::from([12]));

        assert_eq!(k("[k0 % 3, k0 / 3, k1 - k0 + 1, --k0]").eval(&[7, 9]).unwrap(), vec![vec![1, 2, 3, 7]]);
    }

    #[test]
    fn parse_and_eval_predicates() {
        let q = p("k0 == k1");
        assert!(q.eval(&[1, 1]).unwrap());
        assert!(!q.eval(&[1, 2]).unwrap());
        assert_eq!(q.dims_read(), BTreeSet::from([0, 1]));

        let src = "k0 == k1 && !(k2 < 3) || false";
        let q = p(src);
        assert_eq!(q.to_string(), src);
        assert!(q.eval(&[1, 1, 5]).unwrap());
        assert!(!q.eval(&[1, 1, 2]).unwrap());
        assert!(!q.eval(&[1, 2, 5]).unwrap());

        // Parentheses around integers and around conditions.
        assert!(p("(k0 + 1) == k1").eval(&[1, 2]).unwrap());
        assert!(p("(k0 == k1)").eval(&[2, 2]).unwrap());
        assert!(p("((k0 + 1) * 2 == k1) && (k1 > (k0))").eval(&[1, 4]).unwrap());
        assert_eq!(p("((k0 == 1))"), p("k0 == 1"));
        assert_eq!(p("(k0 < 1 && k1 < 2) && k2 < 3"), p("k0 < 1 && (k1 < 2 && k2 < 3)"));
        assert_eq!(p("(k0 < 1 && k1 < 2) && k2 < 3").to_string(), "k0 < 1 && k1 < 2 && k2 < 3");
        assert_eq!(p("(k0 < 1 || k1 < 2) && k2 < 3").to_string(), "(k0 < 1 || k1 < 2) && k2 < 3");
        assert_eq!(p("!k0 == 1"), p("!(k0 == 1)"));
        assert_eq!(p("!!true").to_string(), "!!true");
        assert!(p("true").is_always());
        assert!(p("-k0 < 0 && k0 - k1 != 0").eval(&[2, 1]).unwrap());

        // Every operator.
        for (src, want) in [
            ("3 == 3", true),
            ("3 != 3", false),
            ("2 < 3", true),
            ("3 <= 3", true),
            ("3 > 3", false),
            ("3 >= 3", true),
            ("true || false", true),
            ("true && false", false),
            ("!false", true),
        ] {
            assert_eq!(p(src).eval(&[]).unwrap(), want, "{src}");
        }

        // Euclidean division and remainder.
        for src in ["-7 / 2 == -4", "-7 % 2 == 1", "7 / -2 == -3", "7 % -2 == 1", "-7 / -2 == 4", "-7 % -2 == 1"] {
            assert!(p(src).eval(&[]).unwrap(), "{src}");
        }
        // Short-circuit: no division by zero.
        assert!(!p("k1 != 0 && k0 / k1 == 2").eval(&[4, 0]).unwrap());
        assert!(p("k1 == 0 || k0 / k1 == 2").eval(&[4, 0]).unwrap());
    }

    #[test]
    fn key_expression_parse_errors() {
        assert_eq!(kerr("[k0, 2*]"), pe(8, "a number, a key component like k0, or (", "]"));
        assert_eq!(kerr("[k0 k1]"), pe(5, "`,` or `]`", "k1"));
        assert_eq!(kerr(""), pe(1, "a key expression like [k0, k1]", "end of input"));
        assert_eq!(kerr("   "), pe(4, "a key expression like [k0, k1]", "end of input"));
        assert_eq!(kerr("[k0"), pe(4, "`,` or `]`", "end of input"));
        assert_eq!(kerr("[,]"), pe(2, INT_START, ","));
        assert_eq!(kerr("[k0,,]"), pe(5, INT_START, ","));
        assert_eq!(kerr("[x]"), pe(2, INT_START, "x"));
        assert_eq!(kerr("[K0]"), pe(2, INT_START, "K0"));
        assert_eq!(kerr("[true]"), pe(2, INT_START, "true"));
        assert_eq!(kerr("[k0] k1"), pe(6, "end of input", "k1"));
        assert_eq!(kerr("[(k0 + 1]"), pe(9, "`)`", "]"));
        assert_eq!(kerr("[3..3]"), pe(2, "a non-empty range (its start must be smaller than its end)", "3..3"));
        assert_eq!(kerr("[k0, 4 .. 2]"), pe(6, "a non-empty range (its start must be smaller than its end)", "4 .. 2"));
        assert_eq!(kerr("[0..x]"), pe(5, "a number (the end of the range)", "x"));
        assert_eq!(kerr("[0..4294967296]"), pe(5, "a range bound no larger than 4294967295", "4294967296"));
        assert_eq!(
            kerr("[k0 + 9223372036854775808]"),
            pe(7, "a number no larger than 9223372036854775807", "9223372036854775808")
        );
        assert_eq!(kerr("[k0, «]"), pe(6, INT_START, "«"), "columns count characters, not bytes");
        assert_eq!(kerr("[é k0]"), pe(2, INT_START, "é"));

        // Comparisons are not key components.
        let e = kerr("[k0 == 1]");
        assert_eq!((e.column, e.found.as_str()), (5, "=="));
        assert!(e.expected.starts_with("`,` or `]` (a key component is an integer expression"), "{e}");
        // Ranges must be plain and bracketed.
        let e = kerr("0..4");
        assert_eq!((e.column, e.found.as_str()), (2, ".."));
        assert!(e.expected.contains("range component"), "{e}");
        let e = kerr("[-1..3]");
        assert_eq!((e.column, e.found.as_str()), (4, ".."));
        let e = kerr("k0, k1");
        assert_eq!((e.column, e.found.as_str()), (3, ","));
        assert!(e.expected.contains("written in brackets"), "{e}");

        assert_eq!(kerr("[k0, 2*]").to_string(), "column 8: expected a number, a key component like k0, or (, found ]");
    }

    #[test]
    fn predicate_parse_errors() {
        assert_eq!(perr(""), pe(1, PRED_START, "end of input"));
        assert_eq!(perr("k0 + 1"), pe(1, NEED_BOOL, "the integer expression `k0 + 1`"));
        assert!(perr("k0 + 1").to_string().contains("expected a comparison"));
        assert_eq!(perr("k0 == 1 && k1"), pe(12, NEED_BOOL, "the integer expression `k1`"));
        assert_eq!(perr("!(k0 + 1)"), pe(2, NEED_BOOL, "the integer expression `(k0 + 1)`"));
        assert_eq!(perr("true + 1"), pe(1, NEED_INT, "the condition `true`"));
        assert_eq!(perr("(k0 == 1) == 1"), pe(1, NEED_INT, "the condition `(k0 == 1)`"));
        assert_eq!(perr("k0 == (k1 < 2)"), pe(7, NEED_INT, "the condition `(k1 < 2)`"));
        assert_eq!(perr("-(k0 < 2) < 1"), pe(2, NEED_INT, "the condition `(k0 < 2)`"));
        assert_eq!(perr("k0 == "), pe(7, INT_START, "end of input"));
        assert_eq!(perr("k0 == 1 &&"), pe(11, PRED_START, "end of input"));
        assert_eq!(perr("k0 == 1 k2"), pe(9, "`&&`, `||` or end of input", "k2"));
        assert_eq!(perr("(k0 == 1"), pe(9, "`)`", "end of input"));
        assert_eq!(perr("k0 k1"), pe(4, CMP_OPS, "k1"));
        assert_eq!(perr("k0 == 1 & k1 == 2"), pe(9, "`&&`, `||` or end of input (write && for `and`)", "&"));

        let e = perr("k0 < k1 < k2");
        assert_eq!((e.column, e.found.as_str()), (9, "<"));
        assert!(e.expected.contains("comparisons do not chain"), "{e}");
        let e = perr("k0 = 1");
        assert_eq!((e.column, e.found.as_str()), (4, "="));
        assert!(e.expected.starts_with("a comparison operator") && e.expected.contains("write =="), "{e}");
        let e = perr("k0 == 1 && k1 = 2");
        assert_eq!((e.column, e.found.as_str()), (15, "="));
    }

    #[test]
    fn deep_nesting_is_a_parse_error() {
        let too_deep = format!("at most {MAX_NESTING} levels of nesting");
        for (src, pred) in [
            ("(".repeat(10_000), false),
            ("(".repeat(10_000), true),
            (format!("[{}]", "(".repeat(10_000)), false),
            (format!("{}k0", "-".repeat(10_000)), false),
            (format!("{}k0", "-".repeat(10_000)), true),
            (format!("{}true", "!".repeat(10_000)), true),
            (format!("{}k0", "(-".repeat(10_000)), false),
            (format!("{}k0", "!(".repeat(10_000)), true),
        ] {
            let e = if pred { perr(&src) } else { kerr(&src) };
            assert_eq!(e.expected, too_deep, "{e}");
            assert!(e.found.contains("expression nested too deeply (more than 256 levels)"), "{e}");
        }
        assert_eq!(kerr(&"(".repeat(10_000)).column, MAX_NESTING + 1);

        // Exactly at the limit is fine.
        let ok = format!("{}k0{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(k(&ok), k("k0"));
        assert_eq!(p(&format!("{ok} == 1")), p("k0 == 1"));
        let ok = format!("{}(k0 == 1){}", "(".repeat(MAX_NESTING - 1), ")".repeat(MAX_NESTING - 1));
        assert_eq!(p(&ok), p("k0 == 1"));
        assert_eq!(k(&format!("{}k0", "-".repeat(MAX_NESTING))).to_string().len(), MAX_NESTING + 4);

        // Parsing stays well within a small stack, even for the worst mix of
        // operators at every level.
        let worst = format!("{}k0", "true || true && k0 == k0 + k0*(".repeat(10_000));
        let at_limit = format!("{}k0 == 1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                assert!(Predicate::parse(&worst).unwrap_err().found.contains("nested too deeply"));
                assert!(Predicate::parse(&at_limit).is_ok());
            })
            .unwrap()
            .join()
            .unwrap();

        // Long flat chains are not nesting: one n-ary node each.
        let long = vec!["k0"; 20_000].join(" + ");
        let f = k(&long);
        assert_eq!(f.eval(&[2]).unwrap(), vec![vec![40_000]]);
        assert_eq!(k(&f.to_string()), f);
        let conj = vec!["k0 < 5"; 20_000].join(" && ");
        let q = p(&conj);
        assert!(q.eval(&[2]).unwrap());
        assert_eq!(p(&q.to_string()), q);
    }

    #[test]
    fn eval_errors() {
        let err = |f: &str, key: &[u32]| k(f).eval(key).unwrap_err().0;
        assert_eq!(err("[k3]", &[1, 2]), "k3 is out of range for a key of arity 2");
        assert_eq!(
            err("[k0 - 1]", &[0]),
            "component 0 of `[k0 - 1]` is -1 for key [0]: key components must be natural numbers"
        );
        assert_eq!(
            err("[k0, k0 + 4294967295]", &[1]),
            "component 1 of `[k0, k0 + 4294967295]` is 4294967296 for key [1]: key components must be at most 4294967295"
        );
        assert_eq!(err("[k0 / k1]", &[1, 0]), "division by zero in `k0/k1` for key [1, 0]");
        assert_eq!(err("[k0 + 3 % (k1 - 1)]", &[1, 1]), "division by zero in `3%(k1 - 1)` for key [1, 1]");
        assert!(err("[k0*4294967295*4294967295*4294967295]", &[4294967295]).starts_with("arithmetic overflow in `"));
        assert!(err("[-(0 - 9223372036854775807 - 1), k0]", &[]).starts_with("arithmetic overflow in `-(0 - "));
        assert!(err("[(0 - 9223372036854775807 - 1) / -1]", &[]).starts_with("arithmetic overflow"));
        // Intermediate values may be negative.
        assert_eq!(k("[k0 - 5 + k1]").eval(&[1, 5]).unwrap(), vec![vec![1]]);

        assert_eq!(p("k5 == 1").eval(&[1]).unwrap_err().0, "k5 is out of range for a key of arity 1");
        assert_eq!(p("k0 % k1 == 0").eval(&[1, 0]).unwrap_err().0, "division by zero in `k0%k1` for key [1, 0]");
        assert!(p("k0 - 9 < 0").eval(&[1]).unwrap());
    }

    #[test]
    fn identity_and_replicate() {
        assert_eq!(KeyFn::identity(3), k("[k0, k1, k2]"));
        assert!(KeyFn::identity(3).is_identity(3));
        assert!(!k("[k1, k0]").is_identity(2));
        assert!(!k("[k0 + 0]").is_identity(1));
        assert_eq!(KeyFn::replicate(2, 1, 4), k("[k0, 0..4, k1]"));
        assert_eq!(KeyFn::replicate(2, 2, 3), k("[k0, k1, 0..3]"));
        assert_eq!(KeyFn::replicate(0, 0, 1), k("[0..1]"));
        assert_eq!(KeyFn::replicate(1, 0, 2).eval(&[9]).unwrap(), vec![vec![0, 9], vec![1, 9]]);
    }

    #[test]
    fn compose() {
        let c = |a: &str, b: &str| k(a).compose(&k(b)).map(|f| f.to_string());
        assert_eq!(c("[k0]", "[k1, k0]").as_deref(), Some("[k1]"));
        assert_eq!(c("[2*k0 + k1]", "[k1, k0]").as_deref(), Some("[2*k1 + k0]"));
        assert_eq!(c("[k0 + 1]", "[k0 + k1]").as_deref(), Some("[(k0 + k1) + 1]"));
        assert_eq!(c("[k0*2]", "[k0 + k1]").as_deref(), Some("[(k0 + k1)*2]"));
        assert_eq!(c("[-k0]", "[k0 - 1]").as_deref(), Some("[-(k0 - 1)]"));
        assert_eq!(c("[k0, k0]", "[k1*3]").as_deref(), Some("[k1*3, k1*3]"));
        assert_eq!(c("[]", "[k0]").as_deref(), Some("[]"));
        assert_eq!(c("[k2]", "[k0, k1]"), None, "reads beyond the inner arity");
        // Ranges of the outer expression stay.
        assert_eq!(c("[k0, 0..2]", "[k1]").as_deref(), Some("[k1, 0..2]"));
        // Ranges of the inner expression: passed through exactly once.
        assert_eq!(c("[k1, k0]", "[k0, 0..3]").as_deref(), Some("[0..3, k0]"));
        assert_eq!(c("[k0, k1 + 1, k2]", "[k0, 5..7, k1]"), None, "a range in arithmetic");
        assert_eq!(c("[k0, k2, k1]", "[k0, 5..7, k1]").as_deref(), Some("[k0, k1, 5..7]"));
        assert_eq!(c("[k0]", "[k0, 0..3]"), None, "dropping a range duplicates keys");
        assert_eq!(c("[k1, k1]", "[k0, 0..3]"), None, "a range used twice");
        assert_eq!(c("[k1 + 1]", "[k0, 0..3]"), None, "a range in arithmetic");
        assert_eq!(c("[k1, k1 + 1]", "[k0, 0..3]"), None, "a range in arithmetic");

        // Identity is neutral.
        let f = k("[k1 % 4, 0..2, 3*k0]");
        assert_eq!(f.compose(&KeyFn::identity(2)), Some(f.clone()));
        assert_eq!(KeyFn::identity(3).compose(&f), Some(f.clone()));

        // Semantics on an example.
        let outer = k("[k0 + 1, k1, k0 / 2, 0..2]");
        let inner = k("[k0, 0..3]");
        let composed = outer.compose(&inner).expect("composable");
        let mut two_step: Vec<Key> = inner.eval(&[8]).unwrap().iter().flat_map(|x| outer.eval(x).unwrap()).collect();
        two_step.sort();
        assert_eq!(composed.eval(&[8]).unwrap(), two_step);

        // Composition never builds something too deep to re-parse.
        let neg = k("[-k0]");
        let mut g = KeyFn::identity(1);
        let mut steps = 0;
        while let Some(next) = neg.compose(&g) {
            g = next;
            steps += 1;
            assert!(steps <= MAX_NESTING);
        }
        assert_eq!(steps, MAX_NESTING);
        assert_eq!(k(&g.to_string()), g);
        assert_eq!(g.eval(&[3]).unwrap(), vec![vec![3]]);
    }

    #[test]
    fn substitute_remap_and() {
        let q = p("k0 == k1");
        assert_eq!(q.substitute(&k("[k1, k0 + 1]")), Some(p("k1 == k0 + 1")));
        assert_eq!(p("k0*2 == 1").substitute(&k("[k1 + k2]")).unwrap().to_string(), "(k1 + k2)*2 == 1");
        assert_eq!(q.substitute(&k("[k0, 0..2]")), None, "ranges");
        assert_eq!(q.substitute(&k("[k0]")), None, "k1 is beyond the arity");
        assert_eq!(Predicate::always().substitute(&k("[]")), Some(Predicate::always()));
        let f = k("[k2, k0 % 3]");
        let q = p("k0 < 4 && k1 != 0 || !(k0 == k1)");
        let s = q.substitute(&f).unwrap();
        for key in [[0u32, 1, 2], [5, 4, 3], [3, 3, 3]] {
            assert_eq!(s.eval(&key).unwrap(), q.eval(&f.eval(&key).unwrap()[0]).unwrap());
        }

        assert_eq!(k("[2*k0 + k1, 0..2]").remap(&|i| i + 1), k("[2*k1 + k2, 0..2]"));
        assert_eq!(p("k0 == k1 && !(k2 < 3)").remap(&|i| 2 - i), p("k2 == k1 && !(k0 < 3)"));

        let a = p("k0 == 1");
        assert_eq!(Predicate::always().and(&a), a);
        assert_eq!(a.and(&Predicate::always()), a);
        assert_eq!(Predicate::always().and(&Predicate::always()), Predicate::always());
        assert_eq!(p("k0 < 1 && k1 < 2").and(&p("k2 < 3 && k3 < 4")), p("k0 < 1 && k1 < 2 && k2 < 3 && k3 < 4"));
        assert_eq!(p("k0 < 1 || k1 < 2").and(&a).to_string(), "(k0 < 1 || k1 < 2) && k0 == 1");
        assert_eq!(a.and(&p("false")).to_string(), "k0 == 1 && false");
    }

    #[test]
    fn serde_uses_the_text_form() {
        let f = k("[k0, 2*k1 + k2, 0..4]");
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, "\"[k0, 2*k1 + k2, 0..4]\"");
        assert_eq!(serde_json::from_str::<KeyFn>(&json).unwrap(), f);
        let q = p("k0 == k1 && !(k2 < 3)");
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(json, "\"k0 == k1 && !(k2 < 3)\"");
        assert_eq!(serde_json::from_str::<Predicate>(&json).unwrap(), q);
        let e = serde_json::from_str::<KeyFn>("\"[k0 k1]\"").unwrap_err().to_string();
        assert!(e.contains("bad key expression `[k0 k1]`: column 5: expected `,` or `]`, found k1"), "{e}");
    }

    // --- property tests -----------------------------------------------------

    fn arb_int(max_key: usize) -> impl Strategy<Value = IntExpr> {
        let leaf = prop_oneof![
            (0i64..20).prop_map(IntExpr::Lit),
            (0i64..=i64::MAX).prop_map(IntExpr::Lit),
            (0..max_key).prop_map(IntExpr::Key),
        ];
        let add = prop_oneof![Just(AddOp::Add), Just(AddOp::Sub)];
        let mul = prop_oneof![Just(MulOp::Mul), Just(MulOp::Div), Just(MulOp::Mod)];
        leaf.prop_recursive(5, 40, 4, move |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| IntExpr::Neg(Box::new(e))),
                (inner.clone(), prop::collection::vec((add.clone(), inner.clone()), 1..4))
                    .prop_map(|(f, r)| IntExpr::Sum(Box::new(f), r)),
                (inner.clone(), prop::collection::vec((mul.clone(), inner), 1..4))
                    .prop_map(|(f, r)| IntExpr::Product(Box::new(f), r)),
            ]
        })
    }

    /// `huge_ranges`: also ranges up to `u32::MAX` (not to be evaluated).
    fn arb_component(max_key: usize, huge_ranges: bool) -> impl Strategy<Value = Component> {
        let huge = if huge_ranges { 1 } else { 0 };
        prop_oneof![
            4 => arb_int(max_key).prop_map(Component::Expr),
            1 => (0u32..5, 1u32..4).prop_map(|(lo, n)| Component::Range(lo, lo + n)),
            huge => (0u32..u32::MAX).prop_map(|lo| Component::Range(lo, u32::MAX)),
        ]
    }

    fn arb_keyfn(max_key: usize, len: std::ops::Range<usize>, huge_ranges: bool) -> impl Strategy<Value = KeyFn> {
        prop::collection::vec(arb_component(max_key, huge_ranges), len).prop_map(|components| KeyFn { components })
    }

    fn arb_pred() -> impl Strategy<Value = Predicate> {
        let cmp = prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge)
        ];
        let leaf = prop_oneof![
            any::<bool>().prop_map(PredExpr::Const),
            (cmp, arb_int(4), arb_int(4)).prop_map(|(op, l, r)| PredExpr::Cmp(op, l, r)),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| PredExpr::Not(Box::new(e))),
                prop::collection::vec(inner.clone(), 2..4).prop_map(mk_and),
                prop::collection::vec(inner, 2..4).prop_map(mk_or),
            ]
        })
        .prop_map(|expr| Predicate { expr })
    }

    /// Keys whose components keep arithmetic small.
    fn arb_key(arity: usize) -> impl Strategy<Value = Key> {
        prop::collection::vec(prop_oneof![0u32..10, Just(u32::MAX)], arity)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn keyfn_display_round_trips(f in arb_keyfn(6, 0..5, true)) {
            let text = f.to_string();
            let back = KeyFn::parse(&text).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
            prop_assert_eq!(&back, &f, "text: {}", text);
            prop_assert_eq!(back.to_string(), text);
        }

        #[test]
        fn predicate_display_round_trips(q in arb_pred()) {
            let text = q.to_string();
            let back = Predicate::parse(&text).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
            prop_assert_eq!(&back, &q, "text: {}", text);
        }

        #[test]
        fn compose_agrees_with_two_steps(
            outer in arb_keyfn(3, 0..4, false),
            inner in arb_keyfn(2, 3..4, false),
            key in arb_key(2),
        ) {
            if let Some(c) = outer.compose(&inner) {
                prop_assert_eq!(KeyFn::parse(&c.to_string()).ok(), Some(c.clone()));
                let two_step: Result<Vec<Key>, EvalError> = inner.eval(&key).and_then(|xs| {
                    let mut all = Vec::new();
                    for x in xs {
                        all.extend(outer.eval(&x)?);
                    }
                    Ok(all)
                });
                if let Ok(mut want) = two_step {
                    let mut got = c.eval(&key).map_err(|e| TestCaseError::fail(format!("{c}: {e}")))?;
                    want.sort();
                    got.sort();
                    prop_assert_eq!(got, want, "composed: {}", c);
                }
            } else {
                let ranges_ok = inner.components.iter().enumerate().all(|(i, ic)| {
                    !matches!(ic, Component::Range(..))
                        || outer.passthrough().iter().filter(|&&x| x == Some(i)).count() == 1
                });
                prop_assert!(
                    !ranges_ok || outer.dims_read().iter().any(|&i| i >= 3)
                        || outer.components.iter().any(|c| match c {
                            Component::Expr(IntExpr::Key(_)) | Component::Range(..) => false,
                            Component::Expr(e) => {
                                let mut d = BTreeSet::new();
                                e.collect_dims(&mut d);
                                d.iter().any(|&i| matches!(inner.components[i], Component::Range(..)))
                            }
                        }),
                    "unexpected None for {} ∘ {}", outer, inner
                );
            }
        }

        #[test]
        fn substitute_agrees_with_eval(q in arb_pred(), f in arb_keyfn(3, 4..5, false), key in arb_key(3)) {
            let f = KeyFn {
                components: f.components.into_iter()
                    .map(|c| match c { Component::Range(lo, _) => Component::Expr(IntExpr::Lit(i64::from(lo))), c => c })
                    .collect(),
            };
            let s = q.substitute(&f).expect("no ranges, arity 4 covers k0..k3");
            if let Ok(mapped) = f.eval(&key) {
                if let Ok(want) = q.eval(&mapped[0]) {
                    prop_assert_eq!(s.eval(&key).ok(), Some(want));
                }
            }
        }

        #[test]
        fn parser_never_panics(src in "[\\[\\]()k0-9 ,.+*/%<>=!&|a-z_-]{0,40}") {
            let _ = KeyFn::parse(&src);
            let _ = Predicate::parse(&src);
        }
    }
}
