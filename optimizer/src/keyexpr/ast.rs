//! The abstract syntax of key expressions and predicates: n-ary sums and
//! products, comparisons, flattened `&&`/`||` chains; their structural
//! operations (dims read, substitution, remapping, nesting depth) and the
//! text form with minimal parentheses (see the module doc's canonical form).

use std::collections::BTreeSet;
use std::fmt;

/// `+` or `-` in a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum AddOp {
    Add,
    Sub,
}

/// `*`, `/` or `%` in a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum MulOp {
    Mul,
    Div,
    Mod,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// An integer expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum IntExpr {
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
pub(super) enum Component {
    /// An integer expression.
    Expr(IntExpr),
    /// A range `lo..hi` with `lo < hi`.
    Range(u32, u32),
}

/// A boolean expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum PredExpr {
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

impl AddOp {
    pub(super) fn text(self) -> &'static str {
        match self {
            AddOp::Add => " + ",
            AddOp::Sub => " - ",
        }
    }
}

impl MulOp {
    pub(super) fn text(self) -> &'static str {
        match self {
            MulOp::Mul => "*",
            MulOp::Div => "/",
            MulOp::Mod => "%",
        }
    }
}

impl CmpOp {
    pub(super) fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

impl IntExpr {
    /// Binding strength, for parenthesisation: sum 1, product 2, negation 3, atom 4.
    pub(super) fn prec(&self) -> u8 {
        match self {
            IntExpr::Sum(..) => 1,
            IntExpr::Product(..) => 2,
            IntExpr::Neg(_) => 3,
            IntExpr::Lit(_) | IntExpr::Key(_) => 4,
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

    pub(super) fn collect_dims(&self, out: &mut BTreeSet<usize>) {
        if let IntExpr::Key(i) = self {
            out.insert(*i);
        }
        for c in self.children() {
            c.collect_dims(out);
        }
    }

    /// Replace every `ki` by `f(i)`; `None` when `f` does.
    pub(super) fn subst(&self, f: &dyn Fn(usize) -> Option<IntExpr>) -> Option<IntExpr> {
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

    pub(super) fn remap(&self, f: &dyn Fn(usize) -> usize) -> IntExpr {
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
    pub(super) fn nesting(&self) -> usize {
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

/// `items` joined by `&&`, flattening nested conjunctions.
pub(super) fn mk_and(items: Vec<PredExpr>) -> PredExpr {
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
pub(super) fn mk_or(items: Vec<PredExpr>) -> PredExpr {
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
    pub(super) fn collect_dims(&self, out: &mut BTreeSet<usize>) {
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
    pub(super) fn map_ints(&self, g: &dyn Fn(&IntExpr) -> Option<IntExpr>) -> Option<PredExpr> {
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
    pub(super) fn nesting(&self) -> usize {
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
