//! The parser: precedence climbing over the tokens, with the type of each
//! subexpression (integer or boolean) checked as it is built, nesting
//! bounded by [`MAX_NESTING`], and errors that name the column, what was
//! expected and what was found.

use super::ast::{mk_and, mk_or, AddOp, CmpOp, Component, IntExpr, MulOp, PredExpr};
use super::lexer::{lex, Tok, Token};
use super::{KeyFn, Predicate, MAX_NESTING};

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

/// Where an integer expression must start.
pub(super) const INT_START: &str = "a number, a key component like k0, or (";

/// Where a predicate operand may start.
pub(super) const PRED_START: &str = "a number, a key component like k0, true, false, !, or (";

/// An integer expression where a boolean one is needed.
pub(super) const NEED_BOOL: &str = "a comparison (like k0 == 1), true or false";

/// A boolean expression where an integer one is needed.
pub(super) const NEED_INT: &str = "an integer expression";

/// After an integer operand of a predicate.
pub(super) const CMP_OPS: &str = "a comparison operator (==, !=, <, <=, >, >=)";

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

impl KeyFn {
    /// Parse `[e, e, ...]`, a bare single expression `e`, or `[]`.
    pub fn parse(src: &str) -> Result<KeyFn, ParseError> {
        Parser::new(src, false).parse_keyfn().map_err(|e| *e)
    }
}

impl Predicate {
    /// Parse a boolean expression.
    pub fn parse(src: &str) -> Result<Predicate, ParseError> {
        Parser::new(src, true).parse_predicate().map_err(|e| *e)
    }
}
