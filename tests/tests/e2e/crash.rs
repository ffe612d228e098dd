//! End-to-end: `kill -9` at random points while the agent writes its state file, then a
//! restart on the same file, many times over. The file must always be readable state this
//! agent wrote: never torn, never half-renamed, never missing once it has been written.

use std::time::{Duration, Instant};

use skewwatch::state::{LoadError, StateStore};
use skewwatch_e2e::agent::{Agent, TempDir};
use skewwatch_e2e::scenario::Rng;

/// Kill-and-restart rounds.
const TRIALS: usize = 100;

#[test]
fn a_kill_during_state_writes_never_leaves_an_unreadable_file() {
    let dir = TempDir::new("crash-state");
    let path = dir.0.join("state.json");
    let tmp = dir.0.join(".state.json.tmp");
    // The shortest window and a write after every one: ten writes a second.
    let config = format!(
        "window:\n  window_secs: 0.1\nstate:\n  path: {}\n  save_every_windows: 1\n  max_age_secs: 86400\n",
        path.display()
    );
    let store = StateStore {
        path: path.clone(),
        every_windows: 1,
        max_age: Duration::from_secs(86_400),
    };
    let mut rng = Rng::new(27);
    let started = Instant::now();
    let (mut written, mut caught_mid_write, mut restored) = (false, 0, 0);
    for trial in 0..TRIALS {
        let mut agent = Agent::start(&config);
        // Traffic on a few shards, so the state carries baselines worth writing.
        let mut datagram = String::new();
        for shard in 0..16 {
            datagram.push_str(&format!(
                "skewwatch.request:{}|ms|#group:g{},shard:s{shard}\n",
                1 + rng.next_u64() % 50,
                trial % 3
            ));
        }
        agent.send_statsd(datagram.as_bytes());
        std::thread::sleep(Duration::from_millis(20 + rng.next_u64() % 280));
        agent.signal("KILL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while agent.is_running() {
            assert!(Instant::now() < deadline, "the agent outlived kill -9");
            std::thread::sleep(Duration::from_millis(5));
        }
        if tmp.exists() {
            caught_mid_write += 1;
        }
        let log = agent.drain_log();
        if log.iter().any(|l| l.contains("Restored")) {
            restored += 1;
        }
        assert!(
            !log.iter().any(|l| l.contains("not readable state")),
            "trial {trial}: the agent found an unreadable state file at start-up: {log:?}"
        );
        match store.load(skewwatch::clock::wall_now()) {
            Ok(_) => written = true,
            Err(LoadError::Missing(_)) if !written => {}
            Err(e) => panic!("trial {trial}: after kill -9 the state file is unusable: {e}"),
        }
    }
    assert!(written, "no trial ever wrote the state file");
    eprintln!(
        "{TRIALS} kill -9 rounds in {:.1} s: the temporary file was caught mid-write {caught_mid_write} times; \
         the restarted agent logged a restore {restored} times",
        started.elapsed().as_secs_f64()
    );
}
