//! The semantics every executor shares: what a relation and a site are, how
//! inputs are checked and placed, in which order nodes run, how operators
//! treat keys, and how errors name the node at fault.
//!
//! The reference interpreter ([`crate::reference`]) and both runtimes
//! ([`crate::threads`], [`crate::cluster`]) build on this module; the
//! runtimes import nothing from the reference interpreter, which stays the
//! independent oracle they are tested against. What an operator computes is
//! written twice on purpose — plainly in the reference, fast in the
//! runtimes (`threads::local` for both) — and the tests compare the two.

mod error;
mod inputs;
mod keys;
mod order;
mod relation;

pub use error::InterpError;
pub(crate) use error::{bad, eval_key, eval_pred, kernel_err, Res};
pub(crate) use inputs::check_input_tuples;
pub use inputs::{input_bounds, input_sites, AnyLayout};
pub(crate) use keys::{concat_count, concat_kernel, join_key, project};
pub(crate) use order::evaluation_order;
pub use relation::{
    all_keys, erase, random_inputs, random_relation, random_relation_with, Block, IaRun, PhysRelation, PhysTuple,
    Relation, Site,
};
