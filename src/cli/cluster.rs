//! `tapedeck cluster status`'s output: the node's view as a few lines and a table of nodes, or
//! as JSON.
use std::io::Write;

use anyhow::Result;
use serde_json::{Value, json};
use tapedeck::pb::tapedeck::{ClusterStatus, NodeStatus};

use super::escape;

/// Prints `status` on `out`: a summary line and one row per node, or one JSON object.
pub(crate) fn status(status: &ClusterStatus, json: bool, out: &mut impl Write) -> Result<()> {
    if json {
        writeln!(out, "{}", escape::json_line(&status_json(status)))?;
        return Ok(());
    }
    let leader = status
        .leader_id
        .map_or_else(|| "none known".to_string(), |id| id.to_string());
    writeln!(
        out,
        "node {} ({}), leader {leader}, term {}, last log index {}, applied {}",
        status.node_id,
        escape::for_terminal(&status.role),
        status.term,
        status.last_log_index,
        status.applied_index
    )?;
    if status.rejoining {
        writeln!(
            out,
            "rejoining: this node started with an empty log; it votes again once it has caught up"
        )?;
    }
    match (status.progress_from, status.leader_id) {
        (Some(from), _) if from == status.node_id => {}
        (Some(from), _) => writeln!(
            out,
            "each node's progress as the leader, node {from}, sees it"
        )?,
        (None, Some(leader)) => writeln!(
            out,
            "each node's progress is unknown: the leader, node {leader}, did not answer this node"
        )?,
        (None, None) => writeln!(out, "each node's progress is unknown: no leader is known")?,
    }
    writeln!(
        out,
        "{:>4}  {:<24}  {:>10}  {:>8}  HEALTH",
        "NODE", "ADDRESS", "MATCHED", "LAG"
    )?;
    for node in &status.nodes {
        let known = |value: Option<u64>| value.map_or_else(|| "-".to_string(), |v| v.to_string());
        let health = health(status, node);
        writeln!(
            out,
            "{:>4}  {:<24}  {:>10}  {:>8}  {health}",
            node.id,
            escape::for_terminal(&node.address),
            known(node.matched_index),
            known(node.lag),
        )?;
    }
    Ok(())
}

/// A node's health in words: why it is not healthy, when that is known.
fn health(status: &ClusterStatus, node: &NodeStatus) -> String {
    if status.progress_from.is_none() {
        return "unknown".into();
    }
    if node.healthy {
        return "healthy".into();
    }
    // Not healthy: silent, or too far behind (more than 1,000 entries).
    match (node.silent_ms, node.lag) {
        _ if status.progress_from == Some(node.id) => "leading without a majority".into(),
        (_, Some(lag)) if lag > 1_000 => format!("behind by {lag} entries"),
        (None, _) => "not answering (not once since the leader started)".into(),
        (Some(ms), _) => format!("not answering (silent for {:.1} s)", ms as f64 / 1000.0),
    }
}

fn status_json(status: &ClusterStatus) -> Value {
    let nodes: Vec<Value> = status
        .nodes
        .iter()
        .map(|node| {
            json!({
                "id": node.id,
                "address": node.address,
                "matched_index": node.matched_index,
                "lag": node.lag,
                "healthy": node.healthy,
                "silent_ms": node.silent_ms,
            })
        })
        .collect();
    json!({
        "node_id": status.node_id,
        "leader_id": status.leader_id,
        "role": status.role,
        "term": status.term,
        "last_log_index": status.last_log_index,
        "applied_index": status.applied_index,
        "rejoining": status.rejoining,
        "progress_from": status.progress_from,
        "nodes": nodes,
    })
}
