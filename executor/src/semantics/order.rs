//! The order in which nodes are evaluated, the same in every executor.

use super::error::{bad, Res};

/// The evaluation order of a DAG (from [`topo_order`](tra_optimizer::program::topo_order)), after checking that no
/// node shares a name with an input.
pub(crate) fn evaluation_order<'a>(
    order: tra_optimizer::error::Result<Vec<String>>,
    mut node_names: impl Iterator<Item = &'a String>,
    is_input: impl Fn(&str) -> bool,
) -> Res<Vec<String>> {
    let order = order.map_err(|e| {
        let at = if e.at.is_empty() { "?".to_string() } else { e.at.clone() };
        // The message already starts with "node NAME: ".
        let message = e.message.strip_prefix(&format!("node {at}: ")).unwrap_or(&e.message).to_string();
        bad(&at, message)
    })?;
    if let Some(name) = node_names.find(|n| is_input(n)) {
        return Err(bad(name, "the name is also an input's"));
    }
    Ok(order)
}
