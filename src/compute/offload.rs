//! Weight offload to host memory: what a forward pays to fetch weights kept in host DRAM over
//! the GPU's host link (PCIe, or NVLink-C2C on a Grace superchip), and how much of it hides
//! under compute. Pure functions of numbers: the step model
//! ([`crate::compute::StepModel::with_offload`]) applies them to a forward's GPU time, and a
//! kernel-table model can call [`Offload::forward_s`] the same way.
//!
//! sglang has two offloaders (`python/sglang/srt/utils/offloader.py`, as stored at commit
//! 046a9e4; `create_offloader` picks one from the server args):
//!
//! * **V1, `--cpu-offload-gb N`** (`OffloaderV1.maybe_offload_to_cpu`): the decoder layers'
//!   parameters are moved to pinned host memory in layer order from the first layer until `N`
//!   GiB per GPU are offloaded; each such module's forward first copies its whole state dict
//!   back to the device (`v.to(device, non_blocking=True)` on the compute stream) and runs on
//!   the copy. Nothing overlaps: every forward pays `offloaded bytes / link` on top of its
//!   compute ([`OffloadMode::Sync`]).
//! * **V2, `--offload-group-size G --offload-num-in-group K --offload-prefetch-step S
//!   --offload-mode cpu`** (`OffloaderV2`, `_hook_module_forward_for_offloader`): of every
//!   group of `G` consecutive decoder layers the last `K` are offloaded — for DeepSeek-style
//!   models only their routed experts (`deepseek_v2.py`'s `offloader_kwargs`: the `FusedMoE`
//!   `w13_weight`, `w2_weight` and, for NVFP4, their block scales; a dense layer offloads
//!   nothing). When an offloaded layer's forward ends, the copy of the offloaded layer `S`
//!   places later starts on a separate stream (`start_onload` on the `offload` stream, cycling
//!   into the next forward), and a layer whose copy has not landed waits for it
//!   (`wait_and_get_device_tensors`). Copies run one after another on that stream. So the copy
//!   hides under the compute of the layers between, and a forward stalls only where the link
//!   is slower than that compute ([`OffloadMode::Prefetch`]).
//!
//! What it is worth: LMSYS's GB200 NVL72 prefill of DeepSeek-R1 in NVFP4 (sgl-project/sglang
//! issue #10903's recipe) runs 4-GPU instances with `--offload-group-size 2
//! --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode cpu`: half the MoE
//! layers' experts in Grace memory, fetched over NVLink-C2C under the other half's compute.

/// How an offloaded weight reaches the GPU.
#[derive(Clone, Debug, PartialEq)]
pub enum OffloadMode {
    /// V1 (`--cpu-offload-gb`): fetched on the compute stream when its module runs.
    Sync,
    /// V2 (`--offload-group-size`): prefetched on a stream of its own.
    Prefetch {
        /// `--offload-group-size`: layers per group.
        group_size: u32,
        /// `--offload-num-in-group`: the last this many layers of each group are offloaded.
        num_in_group: u32,
        /// `--offload-prefetch-step`: how many offloaded layers ahead a copy is started.
        prefetch_step: u32,
    },
}

/// One GPU's offloaded weights and the link they come over.
#[derive(Clone, Debug, PartialEq)]
pub struct Offload {
    /// The mode.
    pub mode: OffloadMode,
    /// Decoder layers a forward walks, in order.
    pub layers: u32,
    /// Bytes fetched for each layer (0 where the layer keeps its weights on the GPU): for V1
    /// the layer's offloaded share, for V2 the offloaded layers' whitelisted weights.
    pub bytes_per_layer: Vec<f64>,
    /// What the host link moves each way, bytes per second (line rate × efficiency).
    pub link_bytes_per_s: f64,
}

/// What offload adds to one forward, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OffloadTime {
    /// The forward's GPU time with offload.
    pub total_s: f64,
    /// Seconds the host link is busy with this forward's fetches.
    pub fetch_s: f64,
    /// Seconds the forward waits for fetches (`total_s` − the compute alone).
    pub stall_s: f64,
}

impl Offload {
    /// The layers V2 offloads among `layers`: `index % group >= group − num` (sglang's
    /// `OffloaderV2.wrap_modules`).
    pub fn prefetch_layers(layers: u32, group_size: u32, num_in_group: u32) -> Vec<u32> {
        let g = group_size.max(1);
        (0..layers)
            .filter(|i| i % g >= g - num_in_group.min(g))
            .collect()
    }

    /// Bytes one forward fetches.
    pub fn bytes_per_forward(&self) -> f64 {
        self.bytes_per_layer.iter().sum()
    }

    /// Bytes of offloaded weights on the device at once during a forward: the copies in
    /// flight and the one in use (V2: `prefetch_step + 1` offloaded layers; V1: the largest
    /// module being run).
    pub fn transient_bytes(&self) -> f64 {
        let max = self.bytes_per_layer.iter().copied().fold(0.0, f64::max);
        match self.mode {
            OffloadMode::Sync => max,
            OffloadMode::Prefetch { prefetch_step, .. } => f64::from(prefetch_step + 1) * max,
        }
    }

    /// One forward whose GPU work without offload takes `compute_s`, spread evenly over the
    /// layers, with forwards running back to back (the busy case: a copy that cycles into the
    /// next forward competes with it).
    pub fn forward_s(&self, compute_s: f64) -> OffloadTime {
        let link = self.link_bytes_per_s.max(f64::MIN_POSITIVE);
        let fetch_s = self.bytes_per_forward() / link;
        match &self.mode {
            OffloadMode::Sync => OffloadTime {
                total_s: compute_s + fetch_s,
                fetch_s,
                stall_s: fetch_s,
            },
            OffloadMode::Prefetch { prefetch_step, .. } => {
                let total_s = self.prefetch_forward_s(compute_s, *prefetch_step, link);
                OffloadTime {
                    total_s,
                    fetch_s,
                    stall_s: (total_s - compute_s).max(0.0),
                }
            }
        }
    }

    /// V2's forward in steady state: four forwards back to back from a cold start (the first
    /// `prefetch_step` copies started at load, `post_init`), the last one's length.
    fn prefetch_forward_s(&self, compute_s: f64, step: u32, link: f64) -> f64 {
        let off: Vec<usize> = self
            .bytes_per_layer
            .iter()
            .enumerate()
            .filter(|(_, b)| **b > 0.0)
            .map(|(i, _)| i)
            .collect();
        let n = off.len();
        if n == 0 {
            return compute_s;
        }
        let layers = self.layers.max(1) as usize;
        let t = compute_s / layers as f64;
        let s = step as usize;
        // When each offloaded layer's copy is started, in this forward's clock: the first `s`
        // at load (long before), the rest when the layer `s` places earlier ends.
        let mut issue: Vec<f64> = vec![f64::NEG_INFINITY; n];
        let (mut now, mut stream_free) = (0.0f64, f64::NEG_INFINITY);
        let mut last = compute_s;
        for _ in 0..4 {
            let start = now;
            let mut next = vec![f64::NAN; n];
            let mut k = 0;
            for layer in 0..layers {
                if k < n && off[k] == layer {
                    let ready = issue[k].max(stream_free) + self.bytes_per_layer[layer] / link;
                    stream_free = ready;
                    now = now.max(ready) + t;
                    // Its forward ended: start the copy `s` offloaded layers on, in this
                    // forward when it is still ahead, else for the next one.
                    let j = k + s;
                    if s >= 1 && j < n {
                        issue[j] = now;
                    } else {
                        next[j % n] = now;
                    }
                    k += 1;
                } else {
                    now += t;
                }
            }
            last = now - start;
            // Copies not started by a layer of this forward (none when `s` ≤ n) start with the
            // next forward.
            issue = next
                .iter()
                .map(|x| if x.is_nan() { now } else { *x })
                .collect();
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(layers: u32, bytes: f64, g: u32, k: u32, s: u32) -> Offload {
        let off = Offload::prefetch_layers(layers, g, k);
        Offload {
            mode: OffloadMode::Prefetch {
                group_size: g,
                num_in_group: k,
                prefetch_step: s,
            },
            layers,
            bytes_per_layer: (0..layers)
                .map(|l| if off.contains(&l) { bytes } else { 0.0 })
                .collect(),
            link_bytes_per_s: 1e9,
        }
    }

    /// sglang's docstring example: group 8, 2 in group → layers 6, 7, 14, 15, 22, 23, …
    #[test]
    fn v2_offloads_the_last_layers_of_each_group() {
        assert_eq!(
            Offload::prefetch_layers(24, 8, 2),
            vec![6, 7, 14, 15, 22, 23]
        );
        assert_eq!(Offload::prefetch_layers(6, 2, 1), vec![1, 3, 5]);
        assert_eq!(Offload::prefetch_layers(4, 1, 1), vec![0, 1, 2, 3]);
    }

    /// V1 fetches on the compute stream: the forward is compute plus every byte over the link.
    #[test]
    fn v1_adds_the_whole_fetch() {
        let o = Offload {
            mode: OffloadMode::Sync,
            layers: 4,
            bytes_per_layer: vec![2e9, 1e9, 0.0, 0.0],
            link_bytes_per_s: 1e9,
        };
        let t = o.forward_s(0.5);
        assert_eq!((t.total_s, t.fetch_s, t.stall_s), (3.5, 3.0, 3.0));
        assert_eq!(o.transient_bytes(), 2e9);
    }

    /// By hand, 6 layers of 1 s, layers 1, 3, 5 offloaded (group 2), step 1, copies of `c` s.
    /// A copy starts when the offloaded layer before ends and has the layer between (1 s) to
    /// land: with c ≤ 1 nothing stalls; with c = 1.5 each of the three waits 0.5 s.
    #[test]
    fn v2_hides_a_copy_under_the_layers_between() {
        let fast = v2(6, 1e9, 2, 1, 1).forward_s(6.0);
        assert_eq!(fast.total_s, 6.0);
        assert_eq!(fast.stall_s, 0.0);
        assert_eq!(fast.fetch_s, 3.0);
        // c = 1.5 s: layer 1's copy started at the end of the previous forward's layer 5
        // (cycled), with layer 0 between: 0.5 s late; layer 3 waits for the copy started
        // when layer 1 ended, 0.5 s; so does layer 5.
        let slow = v2(6, 1.5e9, 2, 1, 1).forward_s(6.0);
        assert!((slow.total_s - 7.5).abs() < 1e-9, "{}", slow.total_s);
        // c = 3 s: one step ahead, a copy cannot start before the offloaded layer before it
        // ended, so each offloaded layer costs its copy and its own compute in turn:
        // 3 × (3 + 1) s.
        let bound = v2(6, 3e9, 2, 1, 1).forward_s(6.0);
        assert!((bound.total_s - 12.0).abs() < 1e-9, "{}", bound.total_s);
        // Prefetching further ahead does not beat the link: three copies still take 4.5 s,
        // which fits in the 6-s forward, so two steps ahead hide all of it.
        let two = v2(6, 1.5e9, 2, 1, 2).forward_s(6.0);
        assert!((two.total_s - 6.0).abs() < 1e-9, "{}", two.total_s);
        assert!(v2(6, 1.5e9, 2, 1, 2).transient_bytes() == 3.0 * 1.5e9);
    }

    /// Nothing offloaded: nothing changes.
    #[test]
    fn no_bytes_no_cost() {
        let o = v2(6, 0.0, 2, 1, 1);
        assert_eq!(o.forward_s(2.0).total_s, 2.0);
    }
}
