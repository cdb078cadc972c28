//! Work spread over the machine's cores with scoped threads: results returned in input
//! order ([`map_in_order`]), so that what is summed from them does not depend on the thread
//! count, or items changed in place ([`for_each_mut`]).

use std::sync::Mutex;

/// The cores this process may use (1 when the system does not say).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `f(i)` for every i in `0..n`, on at most `threads` threads, in order of i. Worker w takes
/// w, w + threads, …; a worker the system cannot start has its share computed on the calling
/// thread instead, and a worker's panic is resumed here.
pub(crate) fn map_in_order<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let threads = threads.min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let f = &f;
    let share =
        move |w: usize| -> Vec<(usize, T)> { (w..n).step_by(threads).map(|i| (i, f(i))).collect() };
    let mut parts: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|w| {
                (
                    w,
                    std::thread::Builder::new().spawn_scoped(scope, move || share(w)),
                )
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|(w, worker)| match worker {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => share(w),
            })
            .collect()
    });
    parts.sort_by_key(|(i, _)| *i);
    parts.into_iter().map(|(_, t)| t).collect()
}

/// `f` on every item, on at most `threads` threads: worker w takes items w, w + threads, …
/// (the calling thread is worker 0; give the largest items first to balance them); a
/// worker the system cannot start has its share done on the calling thread, and a worker's
/// panic is resumed here.
pub(crate) fn for_each_mut<T: Send>(items: &mut [T], threads: usize, f: impl Fn(&mut T) + Sync) {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        items.iter_mut().for_each(f);
        return;
    }
    let slots: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    let (slots, f) = (&slots, &f);
    let share = move |w: usize| {
        for slot in slots.iter().skip(w).step_by(threads) {
            f(&mut slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (1..threads)
            .map(|w| {
                (
                    w,
                    std::thread::Builder::new().spawn_scoped(scope, move || share(w)),
                )
            })
            .collect();
        share(0);
        for (w, worker) in workers {
            match worker {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => share(w),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Results come in input order whatever the thread count, including more threads than
    /// items and none at all.
    #[test]
    fn results_come_in_input_order() {
        let want: Vec<u64> = (0..37u64).map(|i| i * i + 1).collect();
        for threads in [0, 1, 2, 3, 64] {
            assert_eq!(
                map_in_order(37, threads, |i| want[i]),
                want,
                "{threads} threads"
            );
        }
        assert!(map_in_order(0, 4, |i| i).is_empty());
    }

    /// Every item is visited once, whatever the thread count.
    #[test]
    fn each_item_is_visited_once() {
        for threads in [0, 1, 2, 3, 64] {
            let mut items: Vec<u64> = (0..37).collect();
            for_each_mut(&mut items, threads, |x| *x = *x * *x + 1);
            let want: Vec<u64> = (0..37u64).map(|i| i * i + 1).collect();
            assert_eq!(items, want, "{threads} threads");
        }
        for_each_mut(&mut Vec::<u64>::new(), 2, |_| unreachable!());
    }
}
