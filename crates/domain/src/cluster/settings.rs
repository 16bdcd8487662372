//! A cluster's settings as `--node-id`, `--cluster-listen` and `--cluster-peers` give them,
//! and the checks that refuse a cluster that could not work.
use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::NodeId;

/// Voters a cluster may have: a majority of 3 survives one lost node, of 5 two.
const VOTER_COUNTS: [usize; 2] = [3, 5];

/// Entries applied between two snapshots of the state, by default (`--cluster-snapshot-every`).
pub(crate) const DEFAULT_SNAPSHOT_EVERY: u64 = 50_000;

/// How this node takes part in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id, one of `peers`.
    pub node_id: NodeId,
    /// Where this node listens for the other nodes.
    pub listen: SocketAddr,
    /// Every voter's cluster address (`host:port`), this node's included.
    pub peers: BTreeMap<NodeId, String>,
    /// Entries applied between two snapshots of the state; the log keeps as many before the
    /// last snapshot (a follower that far behind catches up from the log, one further behind
    /// is sent the snapshot).
    pub snapshot_every: u64,
}

impl ClusterConfig {
    /// The settings of node `node_id` listening on `listen`, with `peers` as
    /// `--cluster-peers` spells them (`1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`).
    ///
    /// Fails with a message naming the flags when `peers` does not parse, names a node twice,
    /// has other than 3 or 5 voters, or leaves this node out.
    pub fn new(node_id: NodeId, listen: SocketAddr, peers: &str) -> Result<Self, String> {
        if node_id == 0 {
            return Err(
                "--node-id (TAPEDECK_NODE_ID) 0 is not a node id: ids start at 1 \
                 (the metrics say 0 for \"no leader\")"
                    .into(),
            );
        }
        let peers = parse_peers(peers)?;
        if !VOTER_COUNTS.contains(&peers.len()) {
            return Err(format!(
                "--cluster-peers (TAPEDECK_CLUSTER_PEERS) names {} nodes; a cluster has 3 or 5 \
                 voters, so that a majority survives the loss of one or two",
                peers.len()
            ));
        }
        if !peers.contains_key(&node_id) {
            return Err(format!(
                "--node-id (TAPEDECK_NODE_ID) {node_id} is not one of --cluster-peers \
                 (TAPEDECK_CLUSTER_PEERS), which names nodes {}; list this node there too",
                peers
                    .keys()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(Self {
            node_id,
            listen,
            peers,
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
        })
    }
}

/// `1=HOST:PORT,2=HOST:PORT,...` as a map from node id to address.
fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let refused = |what: String| {
        Err(format!(
            "--cluster-peers (TAPEDECK_CLUSTER_PEERS): {what}; write every voter as \
             ID=HOST:PORT, separated by commas, e.g. 1=10.0.0.1:7070,2=10.0.0.2:7070,3=10.0.0.3:7070"
        ))
    };
    if text.contains(';') {
        return refused("`;` separates nothing here".into());
    }
    let mut peers = BTreeMap::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let Some((id, addr)) = item.split_once('=') else {
            return refused(format!("`{item}` has no `=`"));
        };
        let Ok(id) = id.trim().parse::<NodeId>() else {
            return refused(format!("`{id}` is not a node id (a whole number)"));
        };
        if id == 0 {
            return refused("node ids start at 1".into());
        }
        let addr = addr.trim();
        let port = addr
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(port))) if !host.is_empty() && port != 0) {
            return refused(format!("`{addr}` is not HOST:PORT"));
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return refused(format!("node {id} is named twice"));
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 7070))
    }

    #[test]
    fn three_voters_with_this_node_among_them_make_a_cluster() {
        let config = ClusterConfig::new(2, listen(), "1=a:1, 2=b:2,3=[::1]:3").unwrap();
        assert_eq!(config.peers.len(), 3);
        assert_eq!(config.peers[&3], "[::1]:3");
    }

    #[test]
    fn malformed_peers_are_refused_naming_the_flag_and_variable() {
        for peers in [
            "1=a:1,2=b,3=c:3",
            "1=a:1,x=b:2,3=c:3",
            "1=a:1,2b:2,3=c:3",
            "1=a:1,1=b:2,3=c:3",
        ] {
            let err = ClusterConfig::new(1, listen(), peers).unwrap_err();
            assert!(
                err.contains("--cluster-peers (TAPEDECK_CLUSTER_PEERS)"),
                "{err}"
            );
        }
    }

    #[test]
    fn semicolons_and_node_zero_are_refused_saying_why() {
        let semicolons = ClusterConfig::new(1, listen(), "1=a:1;2=b:2;3=c:3").unwrap_err();
        assert!(
            semicolons.contains("`;` separates nothing here"),
            "{semicolons}"
        );
        assert!(semicolons.contains("separated by commas"), "{semicolons}");
        let zero = ClusterConfig::new(0, listen(), "0=a:1,2=b:2,3=c:3").unwrap_err();
        assert!(
            zero.contains("--node-id (TAPEDECK_NODE_ID) 0 is not a node id"),
            "{zero}"
        );
        let peer_zero = ClusterConfig::new(2, listen(), "0=a:1,2=b:2,3=c:3").unwrap_err();
        assert!(peer_zero.contains("node ids start at 1"), "{peer_zero}");
    }

    #[test]
    fn a_cluster_needs_three_or_five_voters_including_this_node() {
        let two = ClusterConfig::new(1, listen(), "1=a:1,2=b:2").unwrap_err();
        assert!(two.contains("3 or 5 voters"), "{two}");
        let absent = ClusterConfig::new(4, listen(), "1=a:1,2=b:2,3=c:3").unwrap_err();
        assert!(
            absent.contains("--node-id (TAPEDECK_NODE_ID) 4"),
            "{absent}"
        );
    }
}
