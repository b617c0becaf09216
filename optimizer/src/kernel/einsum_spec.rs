//! The spec of the `einSum` kernel (`ij_jk_ik`): parsing, the size of each
//! letter, the output shape and the flop count (see the kernel module doc).

use super::shape::show;
use super::KernelRef;
use std::fmt;

/// The name of the Einstein-summation kernel.
pub const EINSUM: &str = "einSum";
/// The maximum over the letters a unary spec drops (`einMax(ijk_ik)`).
pub const EIN_MAX: &str = "einMax";
/// The minimum over the letters a unary spec drops (`einMin(ijk_ik)`).
pub const EIN_MIN: &str = "einMin";

/// A kernel whose one argument is a spec (`einSum`, `einMax`, `einMin`), not
/// a number.
pub fn is_spec_kernel(name: &str) -> bool {
    matches!(name, EINSUM | EIN_MAX | EIN_MIN)
}

/// An argument word of einSum: letters and `_`.
pub(super) fn is_spec_token(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Why an `einSum` spec is malformed, or does not fit its operands' shapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EinSumSpecError {
    /// A character that is neither a letter nor `_`.
    #[error("the spec may hold only letters and `_`, found `{0}`")]
    BadCharacter(char),
    /// Not one or two operands and the output.
    #[error(
        "the spec is one or two operands and the output separated by `_` (like ij_jk_ik or ii_i), `{spec}` has {parts} part(s)"
    )]
    PartCount {
        /// The spec as written.
        spec: String,
        /// How many `_`-separated parts it has.
        parts: usize,
    },
    /// An output letter written twice.
    #[error("output letter `{0}` appears twice")]
    RepeatedOutput(char),
    /// An output letter that no operand has.
    #[error("output letter `{0}` is in no operand")]
    OutputNotInOperands(char),
    /// Applied to a different number of operands than the spec names.
    #[error("takes {expected} operand(s), got {got}")]
    OperandCount {
        /// Operands in the spec.
        expected: usize,
        /// Operands given.
        got: usize,
    },
    /// An operand whose rank differs from its number of letters.
    #[error("operand {operand} has shape {shape:?} but its letters `{letters}` name {} axes", letters.chars().count())]
    RankMismatch {
        /// Which operand (0-based).
        operand: usize,
        /// Its shape.
        shape: Vec<usize>,
        /// Its letters in the spec.
        letters: String,
    },
    /// One letter with two sizes.
    #[error("letter `{letter}` has size {first} and {second} (operand shapes {})", shapes.iter().map(|s| show(s)).collect::<Vec<_>>().join(" and "))]
    SizeConflict {
        /// The letter.
        letter: char,
        /// Its size where first met.
        first: usize,
        /// The other size.
        second: usize,
        /// Every operand's shape.
        shapes: Vec<Vec<usize>>,
    },
}

/// The spec of an `einSum` kernel (see the module doc): each operand's letters
/// and the output's, written `ij_jk_ik`. `parse(s).to_string() == s`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EinSumSpec {
    /// Letters of each operand, one or two operands.
    pub inputs: Vec<Vec<char>>,
    /// Letters of the output: distinct, each in some operand.
    pub output: Vec<char>,
}

impl EinSumSpec {
    /// Parse `ij_jk_ik` (binary) or `ii_i` (unary).
    pub fn parse(text: &str) -> Result<EinSumSpec, EinSumSpecError> {
        if let Some(c) = text.chars().find(|c| !(c.is_ascii_alphabetic() || *c == '_')) {
            return Err(EinSumSpecError::BadCharacter(c));
        }
        let mut parts: Vec<Vec<char>> = text.split('_').map(|p| p.chars().collect()).collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(EinSumSpecError::PartCount { spec: text.to_string(), parts: parts.len() });
        }
        let output = parts.pop().expect("two or more parts");
        for (i, c) in output.iter().enumerate() {
            if output[..i].contains(c) {
                return Err(EinSumSpecError::RepeatedOutput(*c));
            }
            if !parts.iter().any(|p| p.contains(c)) {
                return Err(EinSumSpecError::OutputNotInOperands(*c));
            }
        }
        Ok(EinSumSpec { inputs: parts, output })
    }

    /// The size of every letter, checking operand ranks and that all
    /// occurrences of a letter have one size.
    pub fn sizes(&self, inputs: &[&[usize]]) -> Result<Vec<(char, usize)>, EinSumSpecError> {
        if inputs.len() != self.inputs.len() {
            return Err(EinSumSpecError::OperandCount { expected: self.inputs.len(), got: inputs.len() });
        }
        let mut sizes: Vec<(char, usize)> = Vec::new();
        for (i, (letters, shape)) in self.inputs.iter().zip(inputs).enumerate() {
            if letters.len() != shape.len() {
                return Err(EinSumSpecError::RankMismatch {
                    operand: i,
                    shape: shape.to_vec(),
                    letters: letters.iter().collect(),
                });
            }
            for (&c, &n) in letters.iter().zip(shape.iter()) {
                match sizes.iter().find(|(d, _)| *d == c) {
                    Some(&(_, m)) if m != n => {
                        return Err(EinSumSpecError::SizeConflict {
                            letter: c,
                            first: m,
                            second: n,
                            shapes: inputs.iter().map(|s| s.to_vec()).collect(),
                        })
                    }
                    Some(_) => {}
                    None => sizes.push((c, n)),
                }
            }
        }
        Ok(sizes)
    }

    /// The output shape for operands of these shapes.
    pub fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, EinSumSpecError> {
        let sizes = self.sizes(inputs)?;
        Ok(self.output.iter().map(|c| sizes.iter().find(|(d, _)| d == c).expect("checked").1).collect())
    }

    /// Whether some letter is summed (absent from the output).
    pub fn sums(&self) -> bool {
        self.inputs.iter().flatten().any(|c| !self.output.contains(c))
    }

    /// Flops (see the module doc); 0 for shapes the spec does not accept.
    pub fn flops(&self, inputs: &[&[usize]]) -> u64 {
        let Ok(sizes) = self.sizes(inputs) else { return 0 };
        let terms = sizes.iter().fold(1u64, |acc, &(_, n)| acc.saturating_mul(n as u64));
        match (self.inputs.len(), self.sums()) {
            (2, true) => terms.saturating_mul(2),
            (2, false) | (_, true) => terms,
            _ => 0,
        }
    }

    /// The kernel `einSum(spec)`.
    pub fn kernel(&self) -> KernelRef {
        KernelRef::Named { name: EINSUM.to_string(), args: vec![self.to_string()] }
    }
}

impl fmt::Display for EinSumSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.inputs {
            write!(f, "{}_", p.iter().collect::<String>())?;
        }
        write!(f, "{}", self.output.iter().collect::<String>())
    }
}
