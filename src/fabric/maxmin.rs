//! TEMPORARY full-recompute max-min solver with the final API; replaced by the incremental one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkIdx(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateChange {
    pub flow: FlowId,
    pub old_rate: f64,
    pub new_rate: f64,
}
pub struct Sharing {
    caps: Vec<f64>,
    flows: Vec<Option<(Vec<LinkIdx>, f64)>>,
    rates: Vec<f64>,
    reported: Vec<f64>,
    dirty: bool,
    recomputations: u64,
}
impl Sharing {
    pub fn new(capacities: Vec<f64>) -> Self {
        Self { caps: capacities, flows: Vec::new(), rates: Vec::new(), reported: Vec::new(), dirty: false, recomputations: 0 }
    }
    pub fn add_link(&mut self, capacity: f64) -> LinkIdx {
        self.caps.push(capacity);
        LinkIdx(self.caps.len() as u32 - 1)
    }
    pub fn add_flow(&mut self, path: &[LinkIdx], cap: f64) -> FlowId {
        self.dirty = true;
        let i = self.flows.iter().position(Option::is_none).unwrap_or_else(|| {
            self.flows.push(None);
            self.rates.push(0.0);
            self.reported.push(0.0);
            self.flows.len() - 1
        });
        self.flows[i] = Some((path.to_vec(), cap));
        self.rates[i] = 0.0;
        self.reported[i] = 0.0;
        FlowId(i as u32)
    }
    pub fn remove_flow(&mut self, flow: FlowId) {
        self.dirty = true;
        self.flows[flow.0 as usize] = None;
    }
    pub fn set_capacity(&mut self, link: LinkIdx, capacity: f64) {
        self.dirty = true;
        self.caps[link.0 as usize] = capacity;
    }
    fn refresh(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.recomputations += 1;
        let live: Vec<usize> = (0..self.flows.len()).filter(|&i| self.flows[i].is_some()).collect();
        let fl: Vec<(Vec<LinkIdx>, f64)> = live.iter().map(|&i| self.flows[i].clone().unwrap()).collect();
        let r = reference_rates(&self.caps, &fl);
        for (k, &i) in live.iter().enumerate() {
            self.rates[i] = r[k];
        }
    }
    pub fn rate(&mut self, flow: FlowId) -> f64 {
        self.refresh();
        self.rates[flow.0 as usize]
    }
    pub fn drain_changes(&mut self, out: &mut Vec<RateChange>) {
        self.refresh();
        for i in 0..self.flows.len() {
            if self.flows[i].is_some() && self.rates[i] != self.reported[i] {
                out.push(RateChange { flow: FlowId(i as u32), old_rate: self.reported[i], new_rate: self.rates[i] });
                self.reported[i] = self.rates[i];
            }
        }
    }
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }
}
pub fn reference_rates(capacities: &[f64], flows: &[(Vec<LinkIdx>, f64)]) -> Vec<f64> {
    let mut rate = vec![0.0; flows.len()];
    let mut frozen = vec![false; flows.len()];
    let mut rem = capacities.to_vec();
    loop {
        let mut best = f64::INFINITY;
        for (l, &c) in rem.iter().enumerate() {
            let n = flows.iter().enumerate().filter(|(i, f)| !frozen[*i] && f.0.iter().any(|x| x.0 as usize == l)).count();
            if n > 0 {
                best = best.min(c / n as f64);
            }
        }
        for (i, f) in flows.iter().enumerate() {
            if !frozen[i] {
                best = best.min(f.1 - rate[i]);
            }
        }
        if !best.is_finite() {
            break;
        }
        for (i, f) in flows.iter().enumerate() {
            if !frozen[i] {
                rate[i] += best;
                for l in &f.0 {
                    rem[l.0 as usize] -= best;
                }
            }
        }
        let mut any = false;
        for (i, f) in flows.iter().enumerate() {
            if !frozen[i] && (f.0.iter().any(|l| rem[l.0 as usize] <= 1e-12 * capacities[l.0 as usize].max(1e-30)) || rate[i] >= f.1) {
                frozen[i] = true;
                any = true;
            }
        }
        if !any || frozen.iter().all(|&f| f) {
            break;
        }
    }
    rate
}
