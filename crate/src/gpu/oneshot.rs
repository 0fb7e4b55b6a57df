//! A minimal one-shot channel whose receiver is a future: wgpu's map callbacks fire from
//! `device.poll` natively and from the browser's event loop on the web, and both can await this.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_gone: bool,
}

pub struct Sender<T>(Arc<Mutex<Slot<T>>>);
pub struct Receiver<T>(Arc<Mutex<Slot<T>>>);

pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let s = Arc::new(Mutex::new(Slot { value: None, waker: None, sender_gone: false }));
    (Sender(s.clone()), Receiver(s))
}

impl<T> Sender<T> {
    pub fn send(self, v: T) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.value = Some(v);
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.sender_gone = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Whether awaiting now would not wait (a value was sent, or the sender is gone).
    pub fn is_ready(&self) -> bool {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.value.is_some() || s.sender_gone
    }
}

impl<T> Future for Receiver<T> {
    /// `None` when the sender was dropped without sending.
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = s.value.take() {
            return Poll::Ready(Some(v));
        }
        if s.sender_gone {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
