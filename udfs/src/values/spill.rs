//! Kept rows spilled to disk under a memory limit: sorted runs of scores written to
//! DataFusion's disk manager and read back through a memory map.
//!
//! A session with a memory limit installs its disk manager and memory pool here
//! ([`spill_to`]; the `calibsql` binary and `calibsql.connect` do). From then on a
//! [`super::ValueStore`] holds its rows under a reservation of its own in that pool. When the
//! pool refuses it more, it sorts each group's rows, writes them to one temporary file
//! (DataFusion's: its directory, its disk-space limit), maps the file and keeps the group's
//! slice of the mapping as a sorted run in place of the rows ([`Rows::spilled`]); weighted
//! rows write their weights after their scores, in the same order, as a parallel run
//! ([`Rows::spilled_w`]).
//!
//! A run is an Arrow buffer over the mapping ([`RunWriter::finish`]), so it moves as any buffer
//! does: a partial state hands its runs on without a copy, the final aggregation keeps them
//! as runs, and the readers read them where they lie, as they read the sorted states they
//! merge. The file is removed when the last buffer over it is dropped. A buffer over a
//! mapping is recognised by its address ([`is_spilled`]) so that its bytes are not counted as
//! memory: its pages are the kernel's page cache, which the kernel writes back and drops
//! under pressure. A reader that reads a run in order lets the pages it has read go from the
//! process's resident memory as it goes ([`ReadBehind`]). A state that leaves the process
//! (a Ballista shuffle, a `_state` value written to a file) is copied out as Arrow copies any
//! buffer.
//!
//! The fits' states hold their bytes under such a reservation too ([`Held`]), without
//! spilling: it is given back as soon as a partial state is handed on.
//!
//! [`Rows::spilled`]: super::Rows::spilled
//! [`Rows::spilled_w`]: super::Rows::spilled_w

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, RwLock, Weak};

use arrow::buffer::{Buffer, ScalarBuffer};
use datafusion_common::{resources_datafusion_err, DataFusionError, Result};
use datafusion_execution::disk_manager::DiskManager;
use datafusion_execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion_execution::SpillFile;

use super::order::key;

/// Where kept rows spill to, and the pool whose limit makes them.
#[derive(Debug, Clone)]
pub(crate) struct SpillTarget {
    disk: Arc<DiskManager>,
    pool: Arc<dyn MemoryPool>,
}

/// The installed target, held weakly: the session's runtime owns its disk manager (whose
/// temporary directory goes when it drops) and its pool.
type Installed = (Weak<DiskManager>, Weak<dyn MemoryPool>);

static TARGET: RwLock<Option<Installed>> = RwLock::new(None);

/// Makes the aggregates that keep rows (`auc`, `'quantile'` bins, `ece_debiased`, …) created
/// from now on in this process hold their rows under reservations of `pool` and spill sorted
/// runs of them to `disk` when it refuses more, instead of failing with "Resources
/// exhausted". Call it with a session's runtime (`runtime.disk_manager`,
/// `runtime.memory_pool`) when the session has a memory limit; the last call wins, and
/// holds them only while the runtime does.
pub fn spill_to(disk: &Arc<DiskManager>, pool: &Arc<dyn MemoryPool>) {
    *TARGET.write().unwrap_or_else(|e| e.into_inner()) =
        Some((Arc::downgrade(disk), Arc::downgrade(pool)));
}

/// The installed target, if any.
pub(crate) fn target() -> Option<SpillTarget> {
    let installed = TARGET.read().unwrap_or_else(|e| e.into_inner());
    let (disk, pool) = installed.as_ref()?;
    Some(SpillTarget {
        disk: disk.upgrade()?,
        pool: pool.upgrade()?,
    })
}

#[cfg(test)]
impl SpillTarget {
    /// A target of its own: the default disk manager and a pool of `bytes`.
    pub(crate) fn for_tests(bytes: usize) -> Self {
        use datafusion_execution::memory_pool::GreedyMemoryPool;
        SpillTarget {
            disk: Arc::new(DiskManager::builder().build().unwrap()),
            pool: Arc::new(GreedyMemoryPool::new(bytes)),
        }
    }

    /// A target whose disk manager is disabled: every spill fails.
    pub(crate) fn without_disk(bytes: usize) -> Self {
        use datafusion_execution::disk_manager::DiskManagerMode;
        use datafusion_execution::memory_pool::GreedyMemoryPool;
        SpillTarget {
            disk: Arc::new(
                DiskManager::builder()
                    .with_mode(DiskManagerMode::Disabled)
                    .build()
                    .unwrap(),
            ),
            pool: Arc::new(GreedyMemoryPool::new(bytes)),
        }
    }

    /// Bytes reserved in the pool.
    pub(crate) fn reserved(&self) -> usize {
        self.pool.reserved()
    }

    /// A [`Held`] in this target's pool.
    pub(crate) fn held(&self, func: &str) -> Held {
        Held(Some(self.reservation(func)))
    }
}

/// The address ranges (start → end) of the mappings alive in this process.
static MAPPED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// True when `buffer`'s values lie in a spilled run's mapping (not on the heap).
pub(crate) fn is_spilled(buffer: &ScalarBuffer<f64>) -> bool {
    lies_in_mapping(buffer)
}

/// Values a sequential reader of a spilled run reads between two [`ReadBehind::advance`]s
/// that let pages go (2 MiB).
const FORGET_EVERY: usize = 1 << 18;

/// Lets the pages of a spilled run go from this process's resident memory behind a reader
/// that reads it in order: the pages stay in the kernel's page cache (the mapping is of an
/// unchanged file, read only), and a later read maps them again. Without it, every page of
/// a spilled run read once counts in the resident memory until the run is dropped: as much
/// as the rows would have taken in memory. Does nothing for a part in memory.
#[derive(Debug)]
pub(crate) struct ReadBehind {
    mapped: bool,
    /// Values read and let go.
    done: usize,
}

impl ReadBehind {
    pub(crate) fn new(part: &[f64]) -> Self {
        ReadBehind {
            mapped: lies_in_mapping(part),
            done: 0,
        }
    }

    /// `part` has been read up to `at` (it is the slice given to [`Self::new`]); every
    /// [`FORGET_EVERY`] values, the pages behind go.
    #[inline]
    pub(crate) fn advance(&mut self, part: &[f64], at: usize) {
        if self.mapped && at >= self.done + FORGET_EVERY {
            forget_pages(&part[self.done..at]);
            self.done = at;
        }
    }
}

/// True when `part` lies in a spilled run's mapping.
fn lies_in_mapping(part: &[f64]) -> bool {
    let at = part.as_ptr() as usize;
    let mapped = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
    mapped
        .range(..=at)
        .next_back()
        .is_some_and(|(_, &end)| at < end)
}

/// Takes the whole pages under `read` (in a spilled run's mapping) out of the resident set
/// (`madvise(MADV_DONTNEED)`; nothing elsewhere). The page that holds `read`'s end may hold
/// values not yet read: it is kept.
fn forget_pages(read: &[f64]) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const PAGE: usize = 4096;
        let start = read.as_ptr() as usize & !(PAGE - 1);
        let end = (read.as_ptr() as usize + std::mem::size_of_val(read)) & !(PAGE - 1);
        if end > start {
            // SAFETY: [start, end) is whole pages of a read-only shared mapping of a file
            // that is never written again (`RunWriter::finish`), alive while `read` is
            // borrowed; MADV_DONTNEED on it drops the process's page table entries only, and
            // the next read maps the same bytes back from the file. Advice: a failure (a
            // page size other than 4 KiB) changes nothing.
            #[allow(unsafe_code)]
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = read;
}

/// A mapped file of runs: the mapping, then the file (removed when the last reference to it
/// drops), in that order of dropping.
struct Mapping {
    map: memmap2::Mmap,
    _file: Arc<dyn SpillFile>,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        MAPPED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.map.as_ptr() as usize));
    }
}

/// A state's bytes held under a reservation of its own in the installed pool (none without
/// one: the state's `size` then reports its bytes to DataFusion as usual).
///
/// DataFusion's aggregation without `GROUP BY` only grows its reservation, from the sizes
/// its accumulators report, and frees it when its stream is dropped: a partial state handed
/// on would count twice, in the partial's reservation and in the final aggregation that
/// merges it, until the partial's stream goes (a race that failed `fit_field_calib` under
/// `--memory-limit 256M` now and then). A reservation of the state's own follows its bytes
/// down when the rows are handed on, and lets a store spill when the pool refuses it more.
///
/// It is registered as one that cannot spill, though the store does: DataFusion's fair pool
/// gives each spilling consumer an equal share of the pool, counting consumers that are done
/// but not yet dropped, so a final aggregation would spill rows that fit. As it is, a state
/// grows while the pool has room.
#[derive(Debug, Default)]
pub(crate) struct Held(Option<MemoryReservation>);

impl Held {
    /// A reservation named for `func` in the installed target's pool, if there is one.
    pub(crate) fn new(func: &str) -> Self {
        Held(target().map(|t| t.reservation(func)))
    }

    /// Whether the bytes are held here (and not to be reported by `size`).
    pub(crate) fn holds(&self) -> bool {
        self.0.is_some()
    }

    /// Grows or shrinks the reservation to `bytes`; the pool's error when it refuses.
    pub(crate) fn follow(&mut self, bytes: usize) -> Result<()> {
        match &mut self.0 {
            None => Ok(()),
            Some(r) if bytes <= r.size() => {
                r.shrink(r.size() - bytes);
                Ok(())
            }
            Some(r) => r.try_resize(bytes),
        }
    }
}

impl SpillTarget {
    /// The pool's limit, when it has one.
    pub(crate) fn limit(&self) -> Option<usize> {
        match self.pool.memory_limit() {
            MemoryLimit::Finite(bytes) => Some(bytes),
            _ => None,
        }
    }

    fn reservation(&self, func: &str) -> MemoryReservation {
        MemoryConsumer::new(format!("{func} state")).register(&self.pool)
    }
}

/// A mapped file of runs: the buffer of all of them, and each run's (start, length) in it.
pub(crate) type Written = (ScalarBuffer<f64>, Vec<(usize, usize)>);

/// Writes sorted runs, one after the other, to one temporary file; [`RunWriter::finish`]
/// maps the file and gives each run its slice.
pub(crate) struct RunWriter {
    file: Arc<dyn SpillFile>,
    out: BufWriter<Box<dyn datafusion_execution::SpillWriter>>,
    /// Each run's start and length, in values.
    runs: Vec<(usize, usize)>,
    written: usize,
    func: &'static str,
}

impl RunWriter {
    pub(crate) fn new(target: &SpillTarget, func: &'static str) -> Result<Self> {
        let file = target
            .disk
            .create_tmp_file(&format!("{func} spilling kept rows"))?;
        if file.path().is_none() {
            return Err(resources_datafusion_err!(
                "{func}: the disk manager's temporary files are not local files, which kept \
                 rows need to spill"
            ));
        }
        let out = BufWriter::with_capacity(1 << 17, file.open_writer()?);
        Ok(Self {
            file,
            out,
            runs: vec![],
            written: 0,
            func,
        })
    }

    /// Appends one run: the ascending merge of `parts`, each ascending in `total_cmp` order.
    pub(crate) fn push_merged(&mut self, parts: &[&[f64]]) -> Result<()> {
        self.push_in_merge_order(parts, &[], |i, j| parts[i][j])
    }

    /// Appends one run: `weights` (each parallel to its part of `parts`) in the order
    /// [`Self::push_merged`] writes `parts`' scores, so that a weight stays with its score.
    pub(crate) fn push_merged_weights(
        &mut self,
        parts: &[&[f64]],
        weights: &[&[f64]],
    ) -> Result<()> {
        let aligned = parts.len() == weights.len()
            && parts.iter().zip(weights).all(|(p, w)| p.len() == w.len());
        if !aligned {
            return Err(DataFusionError::Internal(format!(
                "{}: spilled weights not parallel to their scores",
                self.func
            )));
        }
        self.push_in_merge_order(parts, weights, |i, j| weights[i][j])
    }

    /// Appends one run: `value(i, j)` for each row j of part i, in the ascending order of the
    /// parts' scores (a k-way merge by the order-preserving keys; on equal scores the part
    /// first given first). `values` are the slices `value` reads, parallel to `parts` (none
    /// when it reads `parts`): spilled ones are let go behind the merge, as `parts` are.
    fn push_in_merge_order(
        &mut self,
        parts: &[&[f64]],
        values: &[&[f64]],
        value: impl Fn(usize, usize) -> f64,
    ) -> Result<()> {
        let start = self.written;
        let mut chunk: Vec<u8> = Vec::with_capacity(1 << 16);
        let out = &mut self.out;
        let mut emit = |x: f64, chunk: &mut Vec<u8>| -> std::io::Result<()> {
            chunk.extend_from_slice(&x.to_ne_bytes());
            if chunk.len() >= 1 << 16 {
                out.write_all(chunk)?;
                chunk.clear();
            }
            Ok(())
        };
        let live: Vec<usize> = (0..parts.len()).filter(|&i| !parts[i].is_empty()).collect();
        let io = |e: std::io::Error| {
            DataFusionError::ResourcesExhausted(format!("{}: spilling kept rows: {e}", self.func))
        };
        let mut behind: Vec<[ReadBehind; 2]> = (0..parts.len())
            .map(|i| [parts[i], values.get(i).copied().unwrap_or(&[])].map(ReadBehind::new))
            .collect();
        let mut read_to = |i: usize, at: usize| {
            behind[i][0].advance(parts[i], at);
            if let Some(v) = values.get(i) {
                behind[i][1].advance(v, at);
            }
        };
        match live[..] {
            [] => {}
            [i] => {
                for j in 0..parts[i].len() {
                    emit(value(i, j), &mut chunk).map_err(io)?;
                    read_to(i, j);
                }
            }
            _ => {
                // The smallest head each time; `at[i]` is part i's next row.
                let mut heads: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = live
                    .iter()
                    .map(|&i| std::cmp::Reverse((key(parts[i][0]), i)))
                    .collect();
                let mut at = vec![0usize; parts.len()];
                while let Some(std::cmp::Reverse((_, i))) = heads.pop() {
                    // The same source while it stays the smallest: no heap work a row.
                    let next_best = heads.peek().map_or(u64::MAX, |r| r.0 .0);
                    let part = parts[i];
                    emit(value(i, at[i]), &mut chunk).map_err(io)?;
                    at[i] += 1;
                    while at[i] < part.len() && key(part[at[i]]) <= next_best {
                        emit(value(i, at[i]), &mut chunk).map_err(io)?;
                        at[i] += 1;
                    }
                    read_to(i, at[i]);
                    if at[i] < part.len() {
                        heads.push(std::cmp::Reverse((key(part[at[i]]), i)));
                    }
                }
            }
        }
        self.out.write_all(&chunk).map_err(io)?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.written += len;
        self.runs.push((start, len));
        Ok(())
    }

    /// Maps the file: the buffer of all runs, and each run's (start, length) in it, in the
    /// order pushed (None: nothing was written).
    #[allow(unsafe_code)]
    pub(crate) fn finish(self) -> Result<Option<Written>> {
        let func = self.func;
        let io = |e: std::io::Error| {
            DataFusionError::ResourcesExhausted(format!("{func}: spilling kept rows: {e}"))
        };
        let mut writer = self.out.into_inner().map_err(|e| io(e.into_error()))?;
        writer.flush().map_err(io)?;
        writer.finish()?;
        drop(writer);
        if self.written == 0 {
            return Ok(None);
        }
        let path = self.file.path().expect("checked local when created");
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the file is this process's own temporary file, written above and never
        // written again; it stays in place while the mapping lives (the mapping holds it).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        // Read in order, mostly: read ahead, and let the pages go early. (Advice only.)
        let _ = map.advise(memmap2::Advice::Sequential);
        let bytes = self.written * size_of::<f64>();
        if map.len() != bytes {
            return Err(DataFusionError::Internal(format!(
                "{func}: a spill file holds {} bytes, {bytes} were written",
                map.len()
            )));
        }
        let start = map.as_ptr() as usize;
        MAPPED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(start, start + bytes);
        let ptr = NonNull::new(map.as_ptr() as *mut u8).expect("a mapping is not null");
        let owner = Arc::new(AssertUnwindSafe(Mapping {
            map,
            _file: self.file,
        }));
        // SAFETY: the mapping is `bytes` long, page-aligned (so aligned for f64), read-only
        // and alive as long as the buffer holds `owner`.
        let buffer = unsafe { Buffer::from_custom_allocation(ptr, bytes, owner) };
        Ok(Some((
            ScalarBuffer::<f64>::new(buffer, 0, self.written),
            self.runs,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs written and mapped read back as the sorted merge of their parts (a plain sort
    /// of the concatenation is the independent reference), and the file is gone when the
    /// last buffer over it drops.
    #[test]
    fn runs_read_back_as_the_merge_of_their_parts() {
        let t = SpillTarget::for_tests(1 << 20);
        let mut w = RunWriter::new(&t, "auc").unwrap();
        let a: Vec<f64> = (0..50_000)
            .map(|i| ((i * 7919) % 50_000) as f64 / 5e4)
            .collect();
        let mut parts: Vec<Vec<f64>> = a.chunks(9_000).map(|c| c.to_vec()).collect();
        parts.iter_mut().for_each(|p| super::super::sort_f64(p));
        parts.push(vec![-0.0, 0.0, 0.0, 1.0]);
        let refs: Vec<&[f64]> = parts.iter().map(|p| &p[..]).collect();
        w.push_merged(&refs).unwrap();
        w.push_merged(&[&[0.5, 0.75], &[]]).unwrap();
        w.push_merged(&[]).unwrap();
        let path = w.file.path().unwrap().to_path_buf();
        let (all, at) = w.finish().unwrap().unwrap();
        let runs: Vec<ScalarBuffer<f64>> = at.iter().map(|&(s, n)| all.slice(s, n)).collect();
        drop(all);
        let mut want: Vec<f64> = parts.concat();
        want.sort_by(f64::total_cmp);
        assert_eq!(runs.len(), 3);
        assert!(runs[0]
            .iter()
            .zip(&want)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        assert_eq!(runs[0].len(), want.len());
        assert_eq!(&runs[1][..], &[0.5, 0.75]);
        assert!(runs[2].is_empty());
        assert!(is_spilled(&runs[1]) && !is_spilled(&ScalarBuffer::from(vec![1.0])));
        assert!(path.exists());
        drop(runs);
        assert!(!path.exists(), "the spill file outlived its buffers");
    }

    /// A spilled run read through [`ReadBehind`], whose pages go from the resident memory
    /// behind the reader, reads the same values again afterwards (mapped back from the
    /// file), and a part in memory is left alone.
    #[test]
    fn pages_let_go_read_back_the_same() {
        let t = SpillTarget::for_tests(1 << 20);
        let mut w = RunWriter::new(&t, "auc").unwrap();
        let n = 3 * FORGET_EVERY + 123;
        let values: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
        w.push_merged(&[&values]).unwrap();
        let (run, _) = w.finish().unwrap().unwrap();
        let mut behind = ReadBehind::new(&run);
        assert!(behind.mapped);
        let mut sum = 0.0;
        for (i, &x) in run.iter().enumerate() {
            sum += x;
            behind.advance(&run, i + 1);
        }
        assert_eq!(behind.done, 3 * FORGET_EVERY);
        assert_eq!(sum, values.iter().sum::<f64>());
        assert!(run.iter().zip(&values).all(|(a, b)| a == b));
        let mut in_memory = ReadBehind::new(&values);
        in_memory.advance(&values, n);
        assert!(!in_memory.mapped && in_memory.done == 0);
    }
}
