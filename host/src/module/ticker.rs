//! What advances the engine's epoch while a guest runs, so a guest that never calls
//! the host still yields and the deadline timer can stop it.
//!
//! A POSIX timer on the calling thread's CPU time would not do (a guest blocked in
//! the host spends none), so it is a monotonic timer whose signal is sent to the
//! calling thread, where the handler increments the epoch: no thread per call. A
//! thread cost every call its stack and a malloc arena mapped and unmapped, TLB
//! shootdowns to the second CPU for every later `munmap`, and at exit the kernel
//! waking it from its sleep only to end it. The first tick comes
//! [`TICK`] after the start, so a call that answers sooner (the common case) takes no
//! signal at all. Where no timer can be made (`RLIMIT_SIGPENDING`), a thread ticks.
//!
//! The signal is `SIGALRM`, which nothing else in the host uses; its handler is
//! installed with `SA_RESTART` (a host syscall it interrupts is restarted, not
//! failed) and `SA_ONSTACK` (it runs on the thread's signal stack, not the guest's).
//! A stray `SIGALRM` only advances the epoch of the engine this thread is running, or
//! nothing: the handler never reads what the signal carries.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::Engine;

/// How often the epoch advances; a running guest yields to the host this often, which
/// is when the deadline timer can stop it.
pub const TICK: Duration = Duration::from_millis(5);

const SIGNAL: libc::c_int = libc::SIGALRM;

thread_local! {
    /// The engine whose epoch this thread's timer advances, while one ticks.
    static TICKING: Cell<*const Engine> = const { Cell::new(std::ptr::null()) };
}

/// Advances the epoch until dropped.
pub struct EpochTicker {
    how: How,
}

enum How {
    /// The engine is boxed so the handler's pointer to it stays valid until the timer
    /// is deleted.
    Timer {
        timer: libc::timer_t,
        _engine: Box<Engine>,
    },
    Thread(Arc<AtomicBool>),
}

impl EpochTicker {
    pub fn start(engine: Engine) -> Self {
        match Self::timer(engine.clone()) {
            Some(how) => EpochTicker { how },
            None => EpochTicker {
                how: Self::thread(engine),
            },
        }
    }

    /// A timer signalling this thread every [`TICK`], or `None` if none can be made
    /// (or this thread already has one).
    fn timer(engine: Engine) -> Option<How> {
        if !TICKING.get().is_null() || !install_handler() {
            return None;
        }
        let engine = Box::new(engine);
        TICKING.set(&*engine);
        // SAFETY: a zeroed sigevent is valid; the fields set are the ones
        // SIGEV_THREAD_ID reads, and the thread id is this thread's (the syscall:
        // glibc's `gettid` wrapper is a null weak symbol in the static build).
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = SIGNAL;
        event.sigev_notify_thread_id = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `event` and `timer` are valid for the call.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) } != 0 {
            TICKING.set(std::ptr::null());
            return None;
        }
        let tick = libc::timespec {
            tv_sec: TICK.as_secs() as libc::time_t,
            tv_nsec: TICK.subsec_nanos() as libc::c_long,
        };
        let every = libc::itimerspec {
            it_interval: tick,
            it_value: tick,
        };
        // SAFETY: `timer` was just created; `every` is valid for the call.
        if unsafe { libc::timer_settime(timer, 0, &every, std::ptr::null_mut()) } != 0 {
            // SAFETY: as above; deleted once.
            unsafe { libc::timer_delete(timer) };
            TICKING.set(std::ptr::null());
            return None;
        }
        Some(How::Timer {
            timer,
            _engine: engine,
        })
    }

    fn thread(engine: Engine) -> How {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                engine.increment_epoch();
            }
        });
        How::Thread(stop)
    }

    /// Whether the epoch advances by a signal to this thread (else by a thread).
    #[cfg(test)]
    fn signals(&self) -> bool {
        matches!(self.how, How::Timer { .. })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        match &self.how {
            How::Timer { timer, .. } => {
                // Deleting the timer also drops a signal of it still pending, so
                // once the pointer is cleared no handler can follow it.
                // SAFETY: the timer is live and deleted once.
                unsafe { libc::timer_delete(*timer) };
                TICKING.set(std::ptr::null());
            }
            How::Thread(stop) => stop.store(true, Ordering::Relaxed),
        }
    }
}

/// Installs the handler once per process; says whether it is installed.
fn install_handler() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe
        // (a thread-local read and an atomic increment).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = tick as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        unsafe { libc::sigaction(SIGNAL, &action, std::ptr::null_mut()) == 0 }
    })
}

extern "C" fn tick(_signal: libc::c_int) {
    let engine = TICKING.get();
    if !engine.is_null() {
        // SAFETY: the pointer is set only while its boxed engine lives (see Drop).
        // `increment_epoch` is one atomic add: async-signal-safe (wasmtime says so).
        unsafe { (*engine).increment_epoch() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Runs a guest that loops forever under an epoch deadline of one tick, with the
    /// ticker `start` makes (just before the guest runs) the only thing advancing the
    /// epoch (a watchdog stops it after 60 s and the test fails): how long it ran
    /// until the epoch stopped it.
    fn spin_until_interrupted(engine: &Engine, start: impl FnOnce() -> EpochTicker) -> Duration {
        let wasm = wat::parse_str(r#"(module (func (export "spin") (loop br 0)))"#).unwrap();
        let module = wasmtime::Module::new(engine, wasm).unwrap();
        let mut store = wasmtime::Store::new(engine, ());
        store.set_epoch_deadline(1);
        store.epoch_deadline_trap();
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (done, engine) = (done.clone(), engine.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(60);
                while !done.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let fired = !done.load(Ordering::Relaxed);
                if fired {
                    engine.increment_epoch();
                }
                fired
            })
        };
        let ticker = start();
        let began = Instant::now();
        let trap = spin.call(&mut store, ()).unwrap_err();
        let ran = began.elapsed();
        done.store(true, Ordering::Relaxed);
        drop(ticker);
        assert!(
            !watchdog.join().unwrap(),
            "nothing but the watchdog stopped the guest"
        );
        assert_eq!(
            trap.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::Interrupt)
        );
        ran
    }

    fn new_engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).unwrap()
    }

    #[test]
    fn a_timer_signal_stops_a_spinning_guest_and_is_gone_once_dropped() {
        let engine = new_engine();
        let ran = spin_until_interrupted(&engine, || {
            let ticker = EpochTicker::start(engine.clone());
            assert!(ticker.signals(), "no timer could be made");
            ticker
        });
        assert!(ran >= TICK / 2, "stopped after {ran:?}, before a tick");
        assert!(TICKING.get().is_null());
    }

    #[test]
    fn a_second_ticker_on_one_thread_is_a_thread_and_stops_a_guest_too() {
        let engine = new_engine();
        let first = EpochTicker::start(engine.clone());
        let second = EpochTicker::start(engine.clone());
        assert!(first.signals() && !second.signals());
        drop(first);
        drop(second);
        // A fresh engine: the dropped thread may tick the old one once more.
        let engine = new_engine();
        let ran = spin_until_interrupted(&engine, || {
            let _timer = EpochTicker::start(engine.clone());
            let thread = EpochTicker::start(engine.clone());
            assert!(!thread.signals());
            // The timer is deleted as the closure returns: only the thread ticks.
            thread
        });
        assert!(ran >= TICK / 2, "stopped after {ran:?}, before a tick");
    }
}
