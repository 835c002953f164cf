//! The job queue of a copy worker: jobs in order, and a close that ends the worker once the
//! queue is empty.

use crate::socket::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

pub(crate) struct WorkQueue<T> {
    state: Mutex<(VecDeque<T>, bool)>,
    cv: Condvar,
}

impl<T> WorkQueue<T> {
    pub fn new() -> WorkQueue<T> {
        WorkQueue {
            state: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
        }
    }

    pub fn push(&self, job: T) {
        lock(&self.state).0.push_back(job);
        self.cv.notify_one();
    }

    /// The next job, waiting for one; None once the queue is closed and empty.
    pub fn next(&self) -> Option<T> {
        let mut s = lock(&self.state);
        loop {
            if let Some(j) = s.0.pop_front() {
                return Some(j);
            }
            if s.1 {
                return None;
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Closes the queue; with `discard`, jobs not yet taken are dropped.
    pub fn close(&self, discard: bool) {
        let mut s = lock(&self.state);
        s.1 = true;
        if discard {
            s.0.clear();
        }
        self.cv.notify_all();
    }
}
