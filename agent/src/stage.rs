//! A stage of the running agent: its name, the token that stops it and the tasks it runs,
//! every one of them watched.
//!
//! Each stage builds itself from its validated configuration and spawns its tasks into a
//! [`Stage`] (the StatsD receiver, the `scrape:` jobs and the fleet input into ingest's, the
//! HTTP server into the outputs', the receivers into delivery's); the assembly (`app`) holds
//! one per part of the data flow (ingest, outputs, pipeline, delivery) and stops them in that
//! order. This room imports nothing of the agent, so every stage can build on it. A task that ends while its stage has not
//! been told to stop has failed (a panic, or a loop that returned early): [`Stage::failed`]
//! names it, and `run` shuts the agent down so that its supervisor restarts the process.
//!
//! Tasks that read from the outside world and can fail on what they read, the `scrape:` jobs,
//! are [`supervise`]d instead: a job that panics is logged, counted in
//! `skewwatch_task_restarts_total{task}` and started again after a backoff, so one exporter
//! that trips a bug does not take the sidecar and every other input down with it. The
//! supervisor itself is a watched task.

use std::future::Future;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// One task of a stage.
#[derive(Debug)]
enum Task {
    /// A tokio task.
    Async(JoinHandle<()>),
    /// An OS thread (the StatsD receiver).
    Thread(std::thread::JoinHandle<()>),
}

impl Task {
    fn is_finished(&self) -> bool {
        match self {
            Task::Async(h) => h.is_finished(),
            Task::Thread(h) => h.is_finished(),
        }
    }
}

/// A stage: a name, the token that stops it and its watched tasks.
#[derive(Debug)]
pub struct Stage {
    name: &'static str,
    stop: CancellationToken,
    tracker: TaskTracker,
    tasks: Vec<Watched>,
}

/// A task and what the stage expects of it.
#[derive(Debug)]
struct Watched {
    name: String,
    task: Task,
    /// Expected to end by itself (a delivery task a reload replaced): waited for at stop,
    /// not reported when it ends.
    retiring: bool,
}

/// How a stage ended in [`Stage::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageStopped {
    /// Tasks that ended by themselves before the deadline.
    pub finished: usize,
    /// Tasks still running at the deadline, aborted (threads cannot be aborted: they are
    /// counted here and left to end with the process).
    pub aborted: usize,
    /// Tasks that had ended abnormally (a panic).
    pub failed: usize,
}

impl Stage {
    /// An empty stage named `name`.
    pub fn new(name: &'static str) -> Stage {
        Stage {
            name,
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            tasks: Vec::new(),
        }
    }

    /// The token that tells this stage's tasks to stop; tasks take a clone.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Spawns a watched task named `task`, in a tracing span of that name.
    pub fn spawn<F>(&mut self, task: impl Into<String>, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = task.into();
        let span = tracing::info_span!("task", name = %task);
        let handle = self.tracker.spawn(fut.instrument(span));
        self.push(task, Task::Async(handle));
    }

    /// Watches a task spawned elsewhere.
    pub fn watch(&mut self, task: impl Into<String>, handle: JoinHandle<()>) {
        self.push(task.into(), Task::Async(handle));
    }

    /// Watches an OS thread.
    pub fn watch_thread(&mut self, task: impl Into<String>, handle: std::thread::JoinHandle<()>) {
        self.push(task.into(), Task::Thread(handle));
    }

    fn push(&mut self, name: String, task: Task) {
        self.tasks.push(Watched {
            name,
            task,
            retiring: false,
        });
    }

    /// The first task that ended although the stage was not told to stop: it failed.
    pub fn failed(&self) -> Option<String> {
        if self.stop.is_cancelled() {
            return None;
        }
        self.tasks
            .iter()
            .find(|w| !w.retiring && w.task.is_finished())
            .map(|w| format!("{} ({})", w.name, self.name))
    }

    /// Takes the tasks of `other` as retiring: they are expected to end by themselves (alert
    /// delivery tasks a reload replaced finish what they owe), and shutdown still waits for
    /// them.
    pub fn adopt_retired(&mut self, other: Stage) {
        self.tasks.extend(other.tasks.into_iter().map(|w| Watched {
            retiring: true,
            ..w
        }));
    }

    /// Tells every task to stop and waits for them until `deadline`; tasks left then are
    /// aborted.
    pub async fn stop(self, deadline: Instant) -> StageStopped {
        self.stop.cancel();
        self.tracker.close();
        let mut report = StageStopped::default();
        for Watched { name, task, .. } in self.tasks {
            match task {
                Task::Async(mut handle) => {
                    match tokio::time::timeout_at(deadline, &mut handle).await {
                        Ok(Ok(())) => report.finished += 1,
                        Ok(Err(error)) => {
                            tracing::error!(stage = self.name, task = %name, %error, "A task failed.");
                            report.failed += 1;
                        }
                        Err(_) => {
                            handle.abort();
                            tracing::warn!(stage = self.name, task = %name, "Stopped at the grace timeout.");
                            report.aborted += 1;
                        }
                    }
                }
                Task::Thread(handle) => {
                    let join = tokio::task::spawn_blocking(move || handle.join());
                    match tokio::time::timeout_at(deadline, join).await {
                        Ok(Ok(Ok(()))) => report.finished += 1,
                        Ok(_) => {
                            tracing::error!(stage = self.name, task = %name, "A thread failed.");
                            report.failed += 1;
                        }
                        Err(_) => {
                            tracing::warn!(stage = self.name, task = %name, "A thread did not stop in time.");
                            report.aborted += 1;
                        }
                    }
                }
            }
        }
        report
    }
}

/// First wait before a failed supervised task is started again; doubled on every failure
/// in a row, up to [`RESTART_BACKOFF_MAX`].
pub const RESTART_BACKOFF_INITIAL: Duration = Duration::from_secs(1);

/// Longest wait before a failed supervised task is started again.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A task that ran this long before failing restarts after [`RESTART_BACKOFF_INITIAL`] again.
const HEALTHY_RUN: Duration = Duration::from_secs(300);

/// Runs the task `start` spawns until `stop` fires; when it panics, logs it, adds one to
/// `restarts` and starts it again after a backoff. A task that returns by itself is not
/// restarted: it was done.
pub async fn supervise(
    task: String,
    stop: CancellationToken,
    restarts: IntCounter,
    mut start: impl FnMut() -> JoinHandle<()>,
) {
    let mut backoff = RESTART_BACKOFF_INITIAL;
    loop {
        let started = Instant::now();
        let mut handle = start();
        let outcome = tokio::select! {
            r = &mut handle => r,
            _ = stop.cancelled() => {
                // The job's own loop watches the same token; a scrape in flight is abandoned.
                handle.abort();
                return;
            }
        };
        match outcome {
            Ok(()) => return,
            Err(error) => {
                restarts.inc();
                if started.elapsed() >= HEALTHY_RUN {
                    backoff = RESTART_BACKOFF_INITIAL;
                }
                tracing::error!(
                    task = %task,
                    %error,
                    restart_in_secs = backoff.as_secs_f64(),
                    "A supervised task failed; it restarts after a backoff."
                );
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => return,
                }
                backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_restarted_with_backoff_and_counted() {
        let restarts = IntCounter::new("r", "r").unwrap();
        let starts = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let n = starts.clone();
        let sup = tokio::spawn(supervise(
            "scrape:t".into(),
            stop.clone(),
            restarts.clone(),
            move || {
                let k = n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if k < 3 {
                        panic!("attempt {k} trips a bug");
                    }
                    std::future::pending::<()>().await;
                })
            },
        ));
        // Backoffs 1 + 2 + 4 s: the fourth start comes after 7 s.
        tokio::time::sleep(Duration::from_millis(6_900)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 4);
        assert_eq!(restarts.get(), 3);
        assert!(!sup.is_finished());
        stop.cancel();
        sup.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_returns_is_not_restarted() {
        let restarts = IntCounter::new("r", "r").unwrap();
        let starts = Arc::new(AtomicUsize::new(0));
        let n = starts.clone();
        supervise(
            "t".into(),
            CancellationToken::new(),
            restarts.clone(),
            move || {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async {})
            },
        )
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        assert_eq!(restarts.get(), 0);
    }

    #[tokio::test]
    async fn a_task_that_ends_before_its_stage_stops_is_reported_failed() {
        let mut stage = Stage::new("ingest");
        stage.spawn("quick", async {});
        stage.spawn("long", std::future::pending());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(stage.failed().as_deref(), Some("quick (ingest)"));
        let report = stage.stop(Instant::now() + Duration::from_millis(50)).await;
        assert_eq!(
            report,
            StageStopped {
                finished: 1,
                aborted: 1,
                failed: 0
            }
        );
    }

    #[tokio::test]
    async fn a_stopped_stage_reports_no_failure_and_its_tasks_end() {
        let mut stage = Stage::new("pipeline");
        let stop = stage.stop_token();
        stage.spawn("loop", async move { stop.cancelled().await });
        assert_eq!(stage.failed(), None);
        let report = stage.stop(Instant::now() + Duration::from_secs(5)).await;
        assert_eq!(report.finished, 1);
        assert_eq!(report.aborted, 0);
    }
}
