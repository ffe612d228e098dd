//! The window's latency histogram: an HDR-style log-linear histogram with `u32` counts, the
//! project's own, shaped for the per-observation path of [`crate::window`].
//!
//! # Layout
//!
//! The lowest discernible value is 1 (one microsecond in the window). With `d` significant
//! figures, `S` is the smallest power of two at or above `2 * 10^d` (32, 256 and 2,048 at 1, 2
//! and 3 figures). Bucket 0 holds the values `0..S` one per slot; bucket `k >= 1` holds
//! `S * 2^(k-1) .. S * 2^k` in `S / 2` slots of width `2^k`. So a value is off by less than
//! `1 / (S / 2)` of itself: 1/16, 1/128 and 1/1024 at 1, 2 and 3 figures. The slots of all
//! buckets lie in one flat array, bucket after bucket, so a value's slot is
//!
//! ```text
//! k     = bits of (v | (S - 1)) - log2(S)        (0 for v < S)
//! index = k * S/2 + (v >> k)
//! ```
//!
//! and the array ends with the bucket of the highest trackable value. This is the layout of an
//! HdrHistogram with the same bounds and precision, and every query answers as that
//! histogram's does (a differential property test holds it to the `hdrhistogram` crate).
//!
//! # Why not a general-purpose HDR histogram
//!
//! The window records into these histograms on every observation, where a general histogram's
//! bookkeeping showed up in profiles: it tracks the minimum, the maximum and the lowest
//! non-zero value on every record, checks its generic counter for overflow, and reads its index
//! parameters from fields spread over several cache lines. Here a record is the slot index
//! from three constants kept in one 24-byte [`Layout`], one saturating add to the slot and
//! one to the total. The maximum is derived at query time from the highest non-zero slot, which
//! gives the same value because every record adds at least 1 to its slot.
//!
//! # Bounds
//!
//! Memory is fixed at construction: 4 bytes a slot, `(buckets + 1) * S / 2` slots. From 0 to
//! one hour in microseconds (the window's range) that is 464 slots (1,856 bytes) at 1
//! significant figure, 3,328 (13,312 bytes) at 2 and 23,552 (94,208 bytes) at 3, plus the
//! 48-byte struct. Counts saturate per slot at `u32::MAX`; the total saturates at `u64::MAX`
//! (and, as in HdrHistogram, counts what was recorded, so it can exceed the sum of the slots
//! once a slot has saturated).

use thiserror::Error;

/// Most significant figures a histogram keeps: 2^18 slots in the first bucket.
pub const MAX_SIGFIG: u8 = 5;

/// Why a histogram could not be built or added to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HistogramError {
    /// More significant figures than [`MAX_SIGFIG`].
    #[error(
        "a latency histogram keeps at most {MAX_SIGFIG} significant figures, {0} were asked for: lower latency_sigfig"
    )]
    Sigfig(u8),
    /// A highest trackable value below 2, which leaves no range to track.
    #[error("the highest trackable value must be at least 2, got {0}: raise the histogram's range")]
    High(u64),
    /// Two histograms of different precision or range were added.
    #[error(
        "histograms of different precision or range cannot be added: build both with the same significant figures and highest value"
    )]
    LayoutMismatch,
}

/// The constants a record needs, computed once at construction and kept together so that the
/// slot index reads one small struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `S - 1`: ORed into a value so that every value below `S` lands in bucket 0.
    sub_mask: u64,
    /// `64 - log2(S)`: the leading zeros of a value of bucket 0 after the OR.
    lz_base: u32,
    /// `log2(S / 2)`: slots per bucket after the first, as a shift.
    half_shift: u32,
    /// Highest trackable value; a larger value past the last slot is counted as this one.
    high: u64,
}

/// A log-linear histogram of `u32` counts from 0 to a highest trackable value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHistogram {
    layout: Layout,
    counts: Box<[u32]>,
    /// Every count recorded or added, saturating.
    total: u64,
}

/// One non-empty slot, as [`LogHistogram::iter_recorded`] yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Highest value the slot stands for.
    pub highest: u64,
    /// Its count.
    pub count: u32,
}

impl Layout {
    fn new(high: u64, sigfig: u8) -> Result<Self, HistogramError> {
        if sigfig > MAX_SIGFIG {
            return Err(HistogramError::Sigfig(sigfig));
        }
        if high < 2 {
            return Err(HistogramError::High(high));
        }
        // Unit resolution up to 2 * 10^d, so that "d figures" holds at 10^d and just below.
        let unit_up_to = 2 * 10u64.pow(u32::from(sigfig));
        let sub_bits = unit_up_to.next_power_of_two().trailing_zeros();
        Ok(Layout {
            sub_mask: (1u64 << sub_bits) - 1,
            lz_base: 64 - sub_bits,
            half_shift: sub_bits - 1,
            high,
        })
    }

    /// The bucket of `v`: how many doublings it lies above bucket 0.
    #[inline]
    fn bucket(self, v: u64) -> u32 {
        self.lz_base - (v | self.sub_mask).leading_zeros()
    }

    #[inline]
    fn index(self, v: u64) -> usize {
        let k = self.bucket(v);
        // Bucket k's slots start at (k + 1) * S/2 and v >> k is in S/2..S for k >= 1 (0..S for
        // bucket 0), so the sum is the flat index without a subtraction.
        ((k as usize) << self.half_shift) + (v >> k) as usize
    }

    /// Lowest value of slot `i`.
    fn value_of(self, i: usize) -> u64 {
        // Bucket 0's slots are the values themselves.
        if i >> self.half_shift < 2 {
            return i as u64;
        }
        let k = (i >> self.half_shift) - 1;
        let half = 1usize << self.half_shift;
        (((i & (half - 1)) + half) as u64) << k
    }

    /// Slots from 0 to the end of the bucket of `high`.
    fn slots(self) -> usize {
        (self.bucket(self.high) as usize + 2) << self.half_shift
    }
}

impl LogHistogram {
    /// An empty histogram of the values `0..=high` (at least 2) kept to `sigfig` significant
    /// figures (at most [`MAX_SIGFIG`]).
    pub fn new(high: u64, sigfig: u8) -> Result<Self, HistogramError> {
        let layout = Layout::new(high, sigfig)?;
        Ok(LogHistogram {
            layout,
            counts: vec![0u32; layout.slots()].into_boxed_slice(),
            total: 0,
        })
    }

    /// Adds `count` (at least 1, as the window's records are) at `value`. The slot saturates at
    /// `u32::MAX`. A value past the last slot is counted at the highest trackable value; the
    /// window clamps before calling, so that branch is cold.
    #[inline]
    pub fn saturating_record_n(&mut self, value: u64, count: u32) {
        debug_assert!(count > 0, "a record stands for at least one request");
        let i = self.layout.index(value);
        match self.counts.get_mut(i) {
            Some(c) => *c = c.saturating_add(count),
            None => self.record_past_the_end(count),
        }
        self.total = self.total.saturating_add(u64::from(count));
    }

    /// Records one request of each value in `values`: the same as
    /// [`Self::saturating_record_n`]`(v, 1)` for each, in a loop of about a dozen instructions
    /// a value, so that the processor has many slots' cache misses in flight at once.
    pub fn saturating_record_each(&mut self, values: &[u32]) {
        let layout = self.layout;
        let top = layout.index(layout.high);
        let counts = &mut self.counts;
        for &v in values {
            let i = layout.index(u64::from(v));
            // Past the last slot counts at the top, as in `saturating_record_n`.
            let i = if i < counts.len() { i } else { top };
            if let Some(c) = counts.get_mut(i) {
                *c = c.saturating_add(1);
            }
        }
        self.total = self.total.saturating_add(values.len() as u64);
    }

    #[cold]
    #[inline(never)]
    fn record_past_the_end(&mut self, count: u32) {
        let i = self.layout.index(self.layout.high);
        self.counts[i] = self.counts[i].saturating_add(count);
    }

    /// Counts recorded and added (saturating at `u64::MAX`).
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was recorded since construction or the last reset.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Slots of the histogram, each a `u32`: its memory is 4 bytes times this.
    pub fn slots(&self) -> usize {
        self.counts.len()
    }

    /// Empties the histogram, keeping its memory.
    pub fn reset(&mut self) {
        self.counts.fill(0);
        self.total = 0;
    }

    /// Adds every count of `other`, which must have the same precision and range. Slots
    /// saturate. Into an empty histogram the other's total is taken as it is; otherwise the
    /// total grows by the sum of the other's slots (what HdrHistogram does, kept so that
    /// quantiles agree with it even after a slot has saturated).
    pub fn add(&mut self, other: &LogHistogram) -> Result<(), HistogramError> {
        if self.layout != other.layout {
            return Err(HistogramError::LayoutMismatch);
        }
        if other.is_empty() {
            return Ok(());
        }
        if self.is_empty() {
            self.counts.copy_from_slice(&other.counts);
            self.total = other.total;
            return Ok(());
        }
        let mut added = 0u64;
        for (a, &b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(b);
            added += u64::from(b);
        }
        self.total = self.total.saturating_add(added);
        Ok(())
    }

    /// Lowest value counted in the same slot as `value`.
    pub fn lowest_equivalent(&self, value: u64) -> u64 {
        let k = self.layout.bucket(value);
        (value >> k) << k
    }

    /// Highest value counted in the same slot as `value` (capped at `u64::MAX`).
    pub fn highest_equivalent(&self, value: u64) -> u64 {
        if value == u64::MAX {
            return u64::MAX;
        }
        let width = 1u64 << self.layout.bucket(value);
        self.lowest_equivalent(value).saturating_add(width) - 1
    }

    /// The highest equivalent value of the highest non-empty slot: at or above every recorded
    /// value, within one slot of the largest. 0 when empty.
    pub fn max(&self) -> u64 {
        self.last_recorded()
            .map_or(0, |i| self.highest_equivalent(self.layout.value_of(i)))
    }

    /// The value at quantile `q`: the highest equivalent value of the slot where the running
    /// count first reaches `ceil(q * len)` (at least 1), the lowest equivalent one for `q == 0`.
    /// `q` above 1 counts as 1. 0 when empty, or when the slots add up to less than that
    /// rank (after a slot saturated).
    pub fn value_at_quantile(&self, q: f64) -> u64 {
        let q = if q > 1.0 { 1.0 } else { q };
        // A float-to-int cast saturates: negative and NaN ranks become 0, then 1.
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        match self.slot_of_rank(rank) {
            // A slot's lowest value is its lowest equivalent.
            Some(i) if q == 0.0 => self.layout.value_of(i),
            Some(i) => self.highest_equivalent(self.layout.value_of(i)),
            None => 0,
        }
    }

    /// The non-empty slots in ascending order of value.
    pub fn iter_recorded(&self) -> impl Iterator<Item = Recorded> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c != 0)
            .map(|(i, &count)| Recorded {
                highest: self.highest_equivalent(self.layout.value_of(i)),
                count,
            })
    }

    /// Counts per bucket of `bounds` (ascending): entry `i` counts the slots whose lowest
    /// equivalent value is in `(bounds[i-1], bounds[i]]`, the last entry those above every
    /// bound. A slot goes under the first bound at or above its *lowest* value, so a value at
    /// or below a bound is never counted above it; one above a bound is counted under it only
    /// when the bound falls inside its slot.
    pub fn counts_by_bound(&self, bounds: &[u64]) -> Vec<u64> {
        let mut counts = vec![0u64; bounds.len() + 1];
        // Slots come in ascending order of value, so the bound index only moves up.
        let mut b = 0;
        for (i, &count) in self.counts.iter().enumerate().filter(|&(_, &c)| c != 0) {
            // A slot's lowest value is its lowest equivalent.
            let low = self.layout.value_of(i);
            while b < bounds.len() && low > bounds[b] {
                b += 1;
            }
            counts[b] += u64::from(count);
        }
        counts
    }

    /// The first slot where the running count reaches `rank`. Sums runs of slots first: most
    /// runs are passed whole, and a run's sum vectorizes.
    fn slot_of_rank(&self, rank: u64) -> Option<usize> {
        const RUN: usize = 16;
        let mut seen = 0u64;
        for (r, run) in self.counts.chunks(RUN).enumerate() {
            let sum: u64 = run.iter().map(|&c| u64::from(c)).sum();
            if seen + sum < rank {
                seen += sum;
                continue;
            }
            for (j, &c) in run.iter().enumerate() {
                seen += u64::from(c);
                if seen >= rank {
                    return Some(r * RUN + j);
                }
            }
        }
        None
    }

    /// The highest non-empty slot, scanning down in runs (whose OR vectorizes).
    fn last_recorded(&self) -> Option<usize> {
        const RUN: usize = 16;
        let r = self
            .counts
            .chunks(RUN)
            .rposition(|run| run.iter().fold(0, |acc, &c| acc | c) != 0)?;
        let run = &self.counts[r * RUN..(r * RUN + RUN).min(self.counts.len())];
        run.iter().rposition(|&c| c != 0).map(|j| r * RUN + j)
    }
}

#[cfg(test)]
mod tests {
    use hdrhistogram::Histogram;
    use proptest::prelude::*;

    use super::*;

    /// The window's range: one hour in microseconds.
    const HIGH: u64 = 3_600_000_000;

    #[derive(Debug, Clone)]
    enum Op {
        Record(u64, u32),
        /// One request of each value, through `saturating_record_each`.
        RecordEach(Vec<u32>),
        /// Adds a histogram holding these records.
        Add(Vec<(u64, u32)>),
        Reset,
    }

    /// Values biased to what breaks an index: small values, bucket edges (powers of two and
    /// their neighbours, the edges of every precision), the top of the range, and anything.
    fn value() -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => 0u64..300,
            3 => (0u32..32, -1i64..=1)
                .prop_map(|(k, d)| (1i64 << k).saturating_add(d).clamp(0, HIGH as i64) as u64),
            1 => Just(HIGH),
            1 => (HIGH - 1000)..=HIGH,
            3 => 0u64..=HIGH,
        ]
    }

    /// Counts biased to 1 and to saturation.
    fn count() -> impl Strategy<Value = u32> {
        prop_oneof![
            4 => 1u32..=3,
            2 => (u32::MAX - 3)..=u32::MAX,
            1 => 1u32..=u32::MAX,
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => (value(), count()).prop_map(|(v, n)| Op::Record(v, n)),
            3 => proptest::collection::vec(
                prop_oneof![
                    4 => value().prop_map(|v| v as u32),
                    // Past the range, up to what 32 bits hold.
                    1 => (HIGH as u32)..=u32::MAX,
                ],
                0..70,
            )
            .prop_map(Op::RecordEach),
            2 => proptest::collection::vec((value(), count()), 0..20).prop_map(Op::Add),
            1 => Just(Op::Reset),
        ]
    }

    fn quantile() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(0.5),
            Just(0.99),
            Just(1.0),
            Just(1.5),
            Just(-0.25),
            0.0f64..=1.0,
        ]
    }

    fn bounds() -> impl Strategy<Value = Vec<u64>> {
        proptest::collection::vec(value(), 0..12).prop_map(|mut b| {
            b.sort_unstable();
            b
        })
    }

    /// The window's former bucket counting, over the reference histogram.
    fn reference_counts_by_bound(h: &Histogram<u32>, bounds: &[u64]) -> Vec<u64> {
        let mut counts = vec![0u64; bounds.len() + 1];
        let mut b = 0;
        for v in h.iter_recorded() {
            let low = h.lowest_equivalent(v.value_iterated_to());
            while b < bounds.len() && low > bounds[b] {
                b += 1;
            }
            counts[b] += u64::from(v.count_at_value());
        }
        counts
    }

    fn both(sigfig: u8) -> (LogHistogram, Histogram<u32>) {
        (
            LogHistogram::new(HIGH, sigfig).unwrap(),
            Histogram::new_with_bounds(1, HIGH, sigfig).unwrap(),
        )
    }

    fn fill(records: &[(u64, u32)], sigfig: u8) -> (LogHistogram, Histogram<u32>) {
        let (mut ours, mut theirs) = both(sigfig);
        for &(v, n) in records {
            ours.saturating_record_n(v, n);
            theirs.saturating_record_n(v, n);
        }
        (ours, theirs)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every query the window makes answers exactly as `hdrhistogram`'s, through records,
        /// saturation, adds and resets.
        #[test]
        fn every_query_agrees_with_hdrhistogram(
            sigfig in 1u8..=3,
            ops in proptest::collection::vec(op(), 0..60),
            quantiles in proptest::collection::vec(quantile(), 1..8),
            probes in proptest::collection::vec(value(), 1..16),
            bounds in bounds(),
        ) {
            let (mut ours, mut theirs) = both(sigfig);
            prop_assert_eq!(ours.slots(), theirs.distinct_values());
            for op in &ops {
                match op {
                    Op::Record(v, n) => {
                        ours.saturating_record_n(*v, *n);
                        theirs.saturating_record_n(*v, *n);
                    }
                    Op::RecordEach(values) => {
                        ours.saturating_record_each(values);
                        for &v in values {
                            theirs.saturating_record_n(u64::from(v), 1);
                        }
                    }
                    Op::Add(records) => {
                        let (o, t) = fill(records, sigfig);
                        ours.add(&o).unwrap();
                        theirs.add(&t).unwrap();
                    }
                    Op::Reset => {
                        ours.reset();
                        theirs.reset();
                    }
                }
                prop_assert_eq!(ours.len(), theirs.len(), "after {:?}", op);
                prop_assert_eq!(ours.is_empty(), theirs.is_empty());
                prop_assert_eq!(ours.max(), theirs.max(), "after {:?}", op);
            }
            for &q in &quantiles {
                prop_assert_eq!(ours.value_at_quantile(q), theirs.value_at_quantile(q), "q {}", q);
            }
            for &v in &probes {
                prop_assert_eq!(ours.lowest_equivalent(v), theirs.lowest_equivalent(v), "v {}", v);
                prop_assert_eq!(ours.highest_equivalent(v), theirs.highest_equivalent(v), "v {}", v);
            }
            let recorded: Vec<(u64, u32)> =
                ours.iter_recorded().map(|r| (r.highest, r.count)).collect();
            let expected: Vec<(u64, u32)> = theirs
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect();
            prop_assert_eq!(recorded, expected);
            prop_assert_eq!(
                ours.counts_by_bound(&bounds),
                reference_counts_by_bound(&theirs, &bounds)
            );
            // Bounds on the recorded slots' edges, where "the lowest value decides" shows:
            // random bounds seldom land on one.
            let mut edges: Vec<u64> = theirs
                .iter_recorded()
                .flat_map(|v| {
                    let high = v.value_iterated_to();
                    let low = theirs.lowest_equivalent(high);
                    [low.saturating_sub(1), low, high]
                })
                .collect();
            edges.sort_unstable();
            edges.dedup();
            prop_assert_eq!(
                ours.counts_by_bound(&edges),
                reference_counts_by_bound(&theirs, &edges)
            );
        }
    }

    #[test]
    fn memory_is_the_documented_slot_count_at_every_precision() {
        // The module docs state these; reliability.md's memory budget uses the middle one.
        for (sigfig, slots) in [(1, 464), (2, 3_328), (3, 23_552)] {
            let h = LogHistogram::new(HIGH, sigfig).unwrap();
            assert_eq!(h.slots(), slots, "sigfig {sigfig}");
        }
        assert_eq!(std::mem::size_of::<Layout>(), 24);
        assert_eq!(std::mem::size_of::<LogHistogram>(), 48);
        // Latency keeps an Option of one: the boxed slice's niche makes it free.
        assert_eq!(std::mem::size_of::<Option<LogHistogram>>(), 48);
    }

    #[test]
    fn out_of_range_precision_and_range_are_refused() {
        assert_eq!(
            LogHistogram::new(HIGH, MAX_SIGFIG + 1),
            Err(HistogramError::Sigfig(MAX_SIGFIG + 1))
        );
        assert_eq!(LogHistogram::new(1, 2), Err(HistogramError::High(1)));
        let mut a = LogHistogram::new(HIGH, 2).unwrap();
        let b = LogHistogram::new(HIGH, 3).unwrap();
        assert_eq!(a.add(&b), Err(HistogramError::LayoutMismatch));
    }

    #[test]
    fn a_value_past_the_last_slot_is_counted_at_the_top() {
        let (mut ours, mut theirs) = both(2);
        ours.saturating_record_n(u64::MAX, 3);
        theirs.saturating_record_n(u64::MAX, 3);
        assert_eq!(ours.max(), theirs.max());
        assert_eq!(ours.len(), 3);
        assert_eq!(ours.value_at_quantile(0.5), theirs.value_at_quantile(0.5));
    }
}
