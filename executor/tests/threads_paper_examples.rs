//! The worked examples of paper 004 on the thread runtime
//! (`shared/paper_examples.rs`), whose `eval_ia` is a drop-in for the
//! reference interpreter's.

use tra_executor::threads::eval_ia;

#[path = "shared/paper_examples.rs"]
mod examples;
