//! Arrival order and cancellation of a session's calls, decided where its messages arrive.
//!
//! The SDK hands every request to a task of its own, and tasks do not start in the order
//! they were spawned: a queue entered from the handler would serve calls in the order the
//! scheduler happened to run them. So the session's transport is wrapped ([`Ordered`]): it
//! numbers each `tools/call` as it arrives and the handler waits for its number's turn
//! ([`CallTicket::turn`]). A call's turn comes once every earlier call finished — ran, was
//! refused, or was cancelled while queued.
//!
//! The same place decides cancellation. Each numbered call gets its abort signal here; a
//! `notifications/cancelled` fires it before the SDK sees the notification. When the call
//! already passed its point of no return (its signal is sealed, e.g. a consuming job read
//! ran), the notification is dropped: the SDK would otherwise drop the call's response, and
//! with it output that nothing can read again. MCP lets a receiver ignore a cancellation of
//! work that can no longer be cancelled.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_core::{AbortReason, AbortSignal};
use futures::Stream;
use parking_lot::Mutex;
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use tokio::sync::watch;

use crate::server::CLIENT_CANCELLED;

/// The calls of one session: who is next, and the live calls' abort signals.
#[derive(Clone, Default)]
pub(crate) struct CallBook {
    inner: Arc<BookInner>,
}

#[derive(Default)]
struct BookInner {
    state: Mutex<BookState>,
    /// The lowest number not finished yet: the call whose turn it is.
    serving: watch::Sender<u64>,
}

#[derive(Default)]
struct BookState {
    next: u64,
    /// Numbers finished out of order (cancelled while queued), above `serving`.
    finished: BTreeSet<u64>,
    /// The abort signal of each live call, with its number (a reused request id replaces
    /// the entry; only the owner's number removes it).
    live: HashMap<RequestId, (u64, AbortSignal)>,
}

impl CallBook {
    /// Numbers a call that just arrived and arms its abort signal.
    pub fn issue(&self, id: RequestId) -> CallTicket {
        let signal = AbortSignal::sealable();
        let seq = {
            let mut state = self.inner.state.lock();
            let seq = state.next;
            state.next += 1;
            state.live.insert(id.clone(), (seq, signal.clone()));
            seq
        };
        CallTicket(Arc::new(TicketInner {
            book: Arc::clone(&self.inner),
            seq,
            id,
            signal,
            finished: AtomicBool::new(false),
        }))
    }

    /// A client cancelled call `id`: fires its signal. `false` when the notification must
    /// not reach the SDK, because the call is past its point of no return (sealed): its
    /// response stands, even when the call has finished and the response is on its way.
    pub fn cancel(&self, id: &RequestId) -> bool {
        let mut state = self.inner.state.lock();
        let Some((_, signal)) = state.live.get(id) else { return true };
        // Seal and abort are decided once, atomically: exactly one of them wins.
        signal.abort(AbortReason::new(CLIENT_CANCELLED));
        if signal.is_sealed() {
            return false;
        }
        // The SDK drops the response now: nothing is left to track.
        state.live.remove(id);
        true
    }

    /// The response to `id` is being sent: the call is over for good.
    fn sent(&self, id: &RequestId) {
        self.inner.state.lock().live.remove(id);
    }

    /// How many calls are live (issued and not finished); for tests.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.inner.state.lock().live.len()
    }
}

impl BookInner {
    fn finish(&self, seq: u64, id: &RequestId) {
        let mut state = self.state.lock();
        // A sealed call stays until its response is sent (a cancellation arriving meanwhile
        // must still be dropped); any other is over.
        if state.live.get(id).is_some_and(|(owner, signal)| *owner == seq && !signal.is_sealed()) {
            state.live.remove(id);
        }
        let mut serving = *self.serving.borrow();
        if seq != serving {
            state.finished.insert(seq);
            return;
        }
        serving += 1;
        while state.finished.remove(&serving) {
            serving += 1;
        }
        self.serving.send_replace(serving);
    }
}

/// One numbered call. Clones share it; it finishes when [`CallTicket::finish`] is called or
/// the last clone goes (a request the SDK refused without running it).
#[derive(Clone)]
pub(crate) struct CallTicket(Arc<TicketInner>);

struct TicketInner {
    book: Arc<BookInner>,
    seq: u64,
    id: RequestId,
    signal: AbortSignal,
    finished: AtomicBool,
}

impl TicketInner {
    fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            self.book.finish(self.seq, &self.id);
        }
    }
}

impl Drop for TicketInner {
    fn drop(&mut self) {
        self.finish();
    }
}

impl CallTicket {
    /// The call's abort signal (fired by the client's cancellation).
    pub fn signal(&self) -> &AbortSignal {
        &self.0.signal
    }

    /// Resolves when every earlier call of the session has finished.
    pub async fn turn(&self) {
        let mut serving = self.0.book.serving.subscribe();
        let seq = self.0.seq;
        // The sender lives in the book this ticket holds: the wait cannot fail.
        let _ = serving.wait_for(|serving| *serving >= seq).await;
    }

    /// Ends the call: the next one's turn comes. Idempotent.
    pub fn finish(&self) {
        self.0.finish();
    }
}

/// A session transport that numbers calls as they arrive and routes cancellations through
/// the call book first (see the module documentation).
pub(crate) struct Ordered<T> {
    inner: T,
    book: CallBook,
}

impl<T> Ordered<T> {
    pub fn new(inner: T) -> Self {
        Self { inner, book: CallBook::default() }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Ordered<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Response(response) => self.book.sent(&response.id),
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    self.book.sent(id);
                }
            }
            _ => {}
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let mut message = self.inner.receive().await?;
            if admit(&self.book, &mut message) {
                return Some(message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A session manager whose sessions' transports are [`Ordered`] (the streamable HTTP server).
pub(crate) struct OrderedSessions<M>(pub M);

impl<M: SessionManager> SessionManager for OrderedSessions<M> {
    type Error = M::Error;
    type Transport = Ordered<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.0.create_session().await?;
        Ok((id, Ordered::new(transport)))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.0.initialize_session(id, message)
    }

    fn has_session(&self, id: &SessionId) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.0.has_session(id)
    }

    fn close_session(&self, id: &SessionId) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.resume(id, last_event_id)
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.0.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(Ordered::new(transport)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.0.event_store()
    }
}

/// Numbers an arriving call; `false` for a cancellation that must not reach the SDK.
fn admit(book: &CallBook, message: &mut ClientJsonRpcMessage) -> bool {
    match message {
        JsonRpcMessage::Request(request) => {
            if let ClientRequest::CallToolRequest(call) = &mut request.request {
                call.extensions.insert(book.issue(request.id.clone()));
            }
            true
        }
        JsonRpcMessage::Notification(notification) => match &notification.notification {
            ClientNotification::CancelledNotification(cancelled) => match &cancelled.params.request_id {
                Some(id) => book.cancel(id),
                None => true,
            },
            _ => true,
        },
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    #[tokio::test]
    async fn turns_follow_the_numbers_and_skip_calls_that_finished_while_queued() {
        let book = CallBook::default();
        let tickets: Vec<CallTicket> = (0..4).map(|n| book.issue(id(n))).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        // Started in reverse: the order must still be the arrival order.
        let mut tasks = Vec::new();
        for (n, ticket) in tickets.iter().enumerate().rev() {
            if n == 2 {
                continue;
            }
            let (ticket, order) = (ticket.clone(), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                ticket.turn().await;
                order.lock().push(n);
                tokio::time::sleep(Duration::from_millis(2)).await;
                ticket.finish();
            }));
        }
        // Call 2 is dropped unrun (refused, or cancelled while queued).
        let dropped = tickets[2].clone();
        drop(tickets);
        drop(dropped);
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(*order.lock(), [0, 1, 3]);
        assert_eq!(book.live(), 0, "finished calls leave nothing behind");
    }

    #[tokio::test]
    async fn a_sealed_call_keeps_its_response_and_an_open_one_is_aborted() {
        let book = CallBook::default();
        let sealed = book.issue(id(1));
        assert!(sealed.signal().seal());
        assert!(!book.cancel(&id(1)), "the notification is dropped");
        assert!(!sealed.signal().is_aborted());
        // Finished, its response not sent yet: a cancellation is still dropped.
        sealed.finish();
        assert!(!book.cancel(&id(1)));
        book.sent(&id(1));
        assert_eq!(book.live(), 0);
        let open = book.issue(id(2));
        assert!(book.cancel(&id(2)));
        assert_eq!(open.signal().reason().map(|r| r.message.as_str()), Some(CLIENT_CANCELLED));
        assert!(book.cancel(&id(9)), "an unknown call's cancellation goes on");
        drop(open);
        assert_eq!(book.live(), 0);
    }
}
