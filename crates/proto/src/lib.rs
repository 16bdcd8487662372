//! tapedeck's gRPC contract, generated from the repository's `proto/` by `build.rs`: Memory
//! Service's two services (`memory.v1`), tapedeck's own management API (`tapedeck.v1`), and the
//! traffic between the nodes of a cluster (`tapedeck.cluster.v1`). Its docs are the proto
//! files' comments.
#![allow(missing_docs, unreachable_pub)]

tonic::include_proto!("memory.v1");

/// tapedeck's own management API, `tapedeck.v1`.
pub mod tapedeck {
    tonic::include_proto!("tapedeck.v1");
}

/// Traffic between the nodes of a cluster, `tapedeck.cluster.v1`.
pub mod cluster {
    tonic::include_proto!("tapedeck.cluster.v1");
}

/// Encoded descriptors of the contract, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("memory_descriptor");
