//! Who a fabric flow belongs to. The fabric carries a tag with every flow and hands it back in
//! the flow's end ([`crate::fabric::FlowEnd`]) without reading it (it is generic over the tag);
//! the simulator routes each end to its owner by the variant.

use super::ids::{InstanceId, PrefillId, ShardId};

/// The owner of a fabric flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowTag {
    /// A batch of a prefill's KV transfer lane (`sglang::transfer`): every flow of the lane's
    /// batch carries it.
    Kv {
        /// The prefill instance sending.
        prefill: PrefillId,
        /// Its transfer lane.
        lane: ShardId,
    },
    /// One batch of a Mooncake Store operation (`sglang::mooncake_store`).
    Store {
        /// The operation's number.
        op: u32,
        /// The batch's number within it.
        part: u32,
    },
    /// An all-to-all (DeepEP dispatch or combine) flow of an instance's forward (`sglang::a2a`).
    A2a(InstanceId),
}
