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

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use dsh_core::{AbortReason, AbortSignal};
use futures::Stream;
use parking_lot::Mutex;
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{
    EventStore, ServerSseMessage, SessionId, SessionManager,
};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_util::sync::CancellationToken;

use crate::server::CLIENT_CANCELLED;
use crate::session::McpSession;

/// The calls of one session: who is next, and the live calls' abort signals.
#[derive(Clone, Default)]
pub(crate) struct CallBook {
    inner: Arc<BookInner>,
}

struct BookInner {
    state: Mutex<BookState>,
    /// The lowest number not finished yet: the call whose turn it is.
    serving: watch::Sender<u64>,
    /// How many calls are open and since when the session has been quiet (the idle timer and
    /// the teardown watch it).
    activity: watch::Sender<Activity>,
}

impl Default for BookInner {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            serving: watch::Sender::default(),
            activity: watch::Sender::new(Activity { open: 0, quiet_since: Instant::now() }),
        }
    }
}

/// A session's calls in flight, for its idle timer and its teardown.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Activity {
    /// Calls issued and not finished (queued or running).
    pub open: usize,
    /// The later of the last request and the end of the last call.
    pub quiet_since: Instant,
}

#[derive(Default)]
struct BookState {
    next: u64,
    /// Numbers finished out of order (cancelled while queued), above `serving`.
    finished: BTreeSet<u64>,
    /// The abort signal of each live call, with its number (a reused request id replaces
    /// the entry; only the owner's number removes it).
    live: HashMap<RequestId, (u64, AbortSignal)>,
    /// The request ids in use: a request with one of them is refused (see [`id_in_use`]).
    in_use: HashMap<RequestId, InUse>,
}

/// Who holds a request id (the id is free again once nobody does).
#[derive(Default)]
struct InUse {
    /// An HTTP request carrying it has not finished answering (see [`CallBook::claim`]).
    http: bool,
    /// The SDK handles it and its response has not been sent.
    handler: bool,
    /// Cancelled: the SDK drops its response, so the handler lets go of the id when the call
    /// finishes instead.
    cancelled: bool,
}

/// The JSON-RPC error code of a request whose id is in use (`Invalid Request`).
pub(crate) const INVALID_REQUEST: i64 = -32600;

/// The message of the JSON-RPC error that refuses a request whose id is already in use by a
/// request of the same session in flight (the first goes on untouched).
pub(crate) fn id_in_use(id: &RequestId) -> String {
    let id = serde_json::to_string(id).unwrap_or_else(|_| id.to_string());
    format!("Invalid Request: request id {id} is already in use by a request in flight")
}

impl BookState {
    /// Lets `release` go of `id`'s entry; the id is free once nobody holds it.
    fn release(&mut self, id: &RequestId, release: impl FnOnce(&mut InUse)) {
        if let Some(entry) = self.in_use.get_mut(id) {
            release(entry);
            if !entry.http && !entry.handler {
                self.in_use.remove(id);
            }
        }
    }
}

/// An HTTP request's hold on its request id (see [`CallBook::claim`]); let go when dropped.
pub(crate) struct IdClaim {
    book: Arc<BookInner>,
    id: RequestId,
}

impl Drop for IdClaim {
    fn drop(&mut self) {
        self.book.state.lock().release(&self.id, |entry| entry.http = false);
    }
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
        self.inner.activity.send_modify(|a| a.open += 1);
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
        let Some((_, signal)) = state.live.get(id) else {
            // Not a call (or one already answered): the SDK drops any response to it.
            state.release(id, |entry| entry.handler = false);
            return true;
        };
        // Seal and abort are decided once, atomically: exactly one of them wins.
        signal.abort(AbortReason::new(CLIENT_CANCELLED));
        if signal.is_sealed() {
            return false;
        }
        // The SDK drops the response now: nothing is left to track but the id, which stays in
        // use until the call's handler has returned.
        state.live.remove(id);
        if let Some(entry) = state.in_use.get_mut(id) {
            entry.cancelled = true;
        }
        true
    }

    /// The response to `id` is being sent: the call is over for good.
    fn sent(&self, id: &RequestId) {
        let mut state = self.inner.state.lock();
        state.live.remove(id);
        state.release(id, |entry| entry.handler = false);
    }

    /// An HTTP request carrying request id `id` arrived: holds the id until the returned
    /// claim is dropped (its response finished or abandoned) and, once the SDK took the
    /// request, until its response is sent. `None` when the id is in use: the request must be
    /// refused before the SDK sees it (which would route the first request's response to it).
    pub fn claim(&self, id: &RequestId) -> Option<IdClaim> {
        let mut state = self.inner.state.lock();
        if state.in_use.contains_key(id) {
            return None;
        }
        state.in_use.insert(id.clone(), InUse { http: true, ..InUse::default() });
        Some(IdClaim { book: Arc::clone(&self.inner), id: id.clone() })
    }

    /// A request with id `id` reaches the SDK; `false` when a request with the same id is
    /// still being handled (the new one must be refused instead).
    fn admit_request(&self, id: &RequestId) -> bool {
        let mut state = self.inner.state.lock();
        let entry = state.in_use.entry(id.clone()).or_default();
        if entry.handler {
            return false;
        }
        entry.handler = true;
        entry.cancelled = false;
        true
    }

    /// The client went away while call `id` ran (its HTTP stream dropped): fires its signal
    /// with `reason`. The SDK still answers it (into the void); a sealed call goes on.
    pub fn abort_call(&self, id: &RequestId, reason: &str) {
        let signal = self.inner.state.lock().live.get(id).map(|(_, signal)| signal.clone());
        if let Some(signal) = signal {
            signal.abort(AbortReason::new(reason));
        }
    }

    /// A request of the session arrived: its idle time starts over.
    pub fn touch(&self) {
        self.inner.activity.send_modify(|a| a.quiet_since = Instant::now());
    }

    /// Watches the session's calls in flight.
    pub fn activity(&self) -> watch::Receiver<Activity> {
        self.inner.activity.subscribe()
    }

    /// Resolves once no call is queued or running.
    pub async fn idle(&self) {
        let mut activity = self.activity();
        // The sender lives in the book this holds: the wait cannot fail.
        let _ = activity.wait_for(|a| a.open == 0).await;
    }

    /// How many calls are live (issued and not finished); for tests.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.inner.state.lock().live.len()
    }
}

impl BookInner {
    fn finish(&self, seq: u64, id: &RequestId) {
        self.activity.send_modify(|a| {
            a.open = a.open.saturating_sub(1);
            if a.open == 0 {
                a.quiet_since = Instant::now();
            }
        });
        let mut state = self.state.lock();
        // A sealed call stays until its response is sent (a cancellation arriving meanwhile
        // must still be dropped); any other is over.
        if state.live.get(id).is_some_and(|(owner, signal)| *owner == seq && !signal.is_sealed()) {
            state.live.remove(id);
        }
        // A cancelled call gets no response: its handler's end frees the id.
        if !state.live.contains_key(id) && state.in_use.get(id).is_some_and(|entry| entry.cancelled) {
            state.release(id, |entry| entry.handler = false);
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

/// What a session's transport and its handler share: the call book, and the session once
/// `initialize` made it (so that whoever ends the session can tear it down).
#[derive(Default)]
pub(crate) struct SessionLink {
    book: CallBook,
    session: OnceLock<Arc<McpSession>>,
    /// Cancelled when the session's teardown starts (stops its idle timer).
    closing: CancellationToken,
    /// The session's place under the server's session cap, given back when it ends.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl SessionLink {
    pub fn book(&self) -> &CallBook {
        &self.book
    }

    /// Binds the session made at `initialize` (once).
    pub fn bind(&self, session: &Arc<McpSession>) {
        let _ = self.session.set(Arc::clone(session));
    }

    /// Tears the session down, complete when this returns: its calls answered or aborted,
    /// its jobs and processes killed and awaited. Idempotent.
    pub async fn close(&self) {
        self.closing.cancel();
        if let Some(session) = self.session.get() {
            session.close().await;
        }
    }
}

/// A session transport that numbers calls as they arrive and routes cancellations through
/// the call book first (see the module documentation).
pub(crate) struct Ordered<T> {
    inner: T,
    link: Arc<SessionLink>,
}

impl<T> Ordered<T> {
    pub fn new(inner: T) -> Self {
        Self::linked(inner, Arc::default())
    }

    fn linked(inner: T, link: Arc<SessionLink>) -> Self {
        Self { inner, link }
    }

    /// The session's link (its book, and the session once initialized).
    pub fn link(&self) -> Arc<SessionLink> {
        Arc::clone(&self.link)
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Ordered<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Response(response) => self.link.book.sent(&response.id),
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    self.link.book.sent(id);
                }
            }
            _ => {}
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let mut message = self.inner.receive().await?;
            if let JsonRpcMessage::Request(request) = &message
                && !self.link.book.admit_request(&request.id)
            {
                // A reused id while the first request is in flight: the SDK would take the
                // new request for the old one (and answer one of them never). Refused here;
                // the first goes on untouched.
                let id = request.id.clone();
                let refusal = ErrorData::new(ErrorCode::INVALID_REQUEST, id_in_use(&id), None);
                if let Err(error) = self.inner.send(ServerJsonRpcMessage::error(refusal, Some(id))).await {
                    tracing::debug!(%error, "could not refuse a request whose id is in use");
                }
                continue;
            }
            if admit(&self.link, &mut message) {
                return Some(message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

tokio::task_local! {
    /// The session-cap permit of the `initialize` request being handled, taken by the
    /// session it creates (see [`OrderedSessions::create_session`]).
    static SESSION_PERMIT: RefCell<Option<OwnedSemaphorePermit>>;
}

/// Runs `handle` (one HTTP request through the SDK) with `permit` for the session it may
/// create; a permit no session took is given back when this returns.
pub(crate) async fn with_session_permit<F: Future>(
    permit: Option<OwnedSemaphorePermit>,
    handle: F,
) -> F::Output {
    SESSION_PERMIT.scope(RefCell::new(permit), handle).await
}

/// A session manager whose sessions' transports are [`Ordered`] (the streamable HTTP
/// server), which ends a session only once its teardown is complete, and times out idle
/// sessions itself: never while a call is in flight, counting from the end of the last call
/// or the last request, whichever is later.
pub(crate) struct OrderedSessions<M> {
    registry: Arc<Registry<M>>,
}

impl<M> Clone for OrderedSessions<M> {
    fn clone(&self) -> Self {
        Self { registry: Arc::clone(&self.registry) }
    }
}

struct Registry<M> {
    manager: M,
    links: Mutex<HashMap<SessionId, Arc<SessionLink>>>,
    idle_timeout: Duration,
    on_no_sessions: Option<fn()>,
}

impl<M: SessionManager> OrderedSessions<M> {
    /// `manager` must not time sessions out itself (its keep-alive off): this does.
    /// `on_no_sessions` is called whenever the last open session has been torn down.
    pub fn new(manager: M, idle_timeout: Duration, on_no_sessions: Option<fn()>) -> Self {
        let links = Mutex::default();
        Self { registry: Arc::new(Registry { manager, links, idle_timeout, on_no_sessions }) }
    }

    fn link(&self, id: &SessionId) -> Option<Arc<SessionLink>> {
        self.registry.links.lock().get(id).cloned()
    }

    /// A request for session `id` arrived: its idle time starts over.
    fn touch(&self, id: &SessionId) {
        if let Some(link) = self.link(id) {
            link.book.touch();
        }
    }

    /// The call book of session `id`, while it is open.
    pub fn book(&self, id: &str) -> Option<CallBook> {
        self.link(&SessionId::from(id)).map(|link| link.book.clone())
    }

    /// Ends every open session (a server shutdown), all at once.
    pub async fn close_all(&self) {
        let ids: Vec<SessionId> = self.registry.links.lock().keys().cloned().collect();
        futures::future::join_all(ids.iter().map(|id| self.close_session(id))).await;
    }
}

/// Closes session `id` when it has been idle for the registry's timeout.
async fn reap_when_idle<M: SessionManager>(
    registry: Weak<Registry<M>>,
    id: SessionId,
    link: Arc<SessionLink>,
) {
    let Some(timeout) = registry.upgrade().map(|r| r.idle_timeout) else { return };
    let mut activity = link.book.activity();
    loop {
        let now = *activity.borrow_and_update();
        let deadline = if now.open == 0 { now.quiet_since.checked_add(timeout) } else { None };
        if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            break;
        }
        let expiry = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = expiry => {}
            changed = activity.changed() => if changed.is_err() { return },
            () = link.closing.cancelled() => return,
        }
    }
    drop(link);
    let Some(registry) = registry.upgrade() else { return };
    tracing::info!(session = %id, ?timeout, "closing an idle MCP session");
    if let Err(error) = (OrderedSessions { registry }).close_session(&id).await {
        tracing::warn!(%error, "could not close an idle MCP session");
    }
}

impl<M: SessionManager> SessionManager for OrderedSessions<M> {
    type Error = M::Error;
    type Transport = Ordered<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.registry.manager.create_session().await?;
        let link = Arc::new(SessionLink::default());
        *link.permit.lock() = SESSION_PERMIT.try_with(|permit| permit.borrow_mut().take()).ok().flatten();
        self.registry.links.lock().insert(id.clone(), Arc::clone(&link));
        tokio::spawn(reap_when_idle(Arc::downgrade(&self.registry), id.clone(), Arc::clone(&link)));
        Ok((id, Ordered::linked(transport, link)))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.registry.manager.initialize_session(id, message)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        // A session whose teardown started is gone for its client (404), not broken (500).
        Ok(self.link(id).is_some() && self.registry.manager.has_session(id).await?)
    }

    /// Tears the session down before the SDK's session ends, so that when this returns (the
    /// `DELETE` is answered) its calls are answered or aborted and its processes are gone.
    /// The work runs in a task of its own: a client that drops its `DELETE` does not cut it
    /// short.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let registry = Arc::clone(&self.registry);
        let id = id.clone();
        let teardown = tokio::spawn(async move {
            let link = registry.links.lock().remove(&id);
            if let Some(link) = &link {
                link.close().await;
            }
            let closed = registry.manager.close_session(&id).await;
            // Only now may another session take this one's place: the permit goes back before
            // the `DELETE` is answered (other holders of the link may let go of it later).
            if let Some(link) = &link {
                drop(link.permit.lock().take());
            }
            if link.is_some()
                && let Some(on_no_sessions) = registry.on_no_sessions
                && registry.links.lock().is_empty()
            {
                on_no_sessions();
            }
            drop(link);
            closed
        });
        match teardown.await {
            Ok(closed) => closed,
            Err(error) => {
                tracing::error!(%error, "an MCP session's teardown failed");
                Ok(())
            }
        }
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        use futures::StreamExt as _;
        self.touch(id);
        let request = match &message {
            JsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        match self.registry.manager.create_stream(id, message).await {
            Ok(stream) => Ok(stream.left_stream()),
            // The session's teardown began after the request was let in: the request is
            // answered as one that came to an ended session, not failed with a 500.
            Err(_) if self.link(id).is_none() && request.is_some() => {
                let refusal = ServerJsonRpcMessage::error(
                    ErrorData::invalid_request(crate::session::SESSION_ENDED, None),
                    request,
                );
                Ok(futures::stream::iter([ServerSseMessage::from_message(refusal)]).right_stream())
            }
            Err(error) => Err(error),
        }
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.touch(id);
        match self.registry.manager.accept_message(id, message).await {
            // A notification or response that came as the session ended goes with it.
            Err(_) if self.link(id).is_none() => Ok(()),
            outcome => outcome,
        }
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.registry.manager.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.registry.manager.resume(id, last_event_id).await
    }

    // Sessions are never restored from a store (none is configured).

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.registry.manager.event_store()
    }
}

/// Numbers an arriving call and hands `initialize` the session's link; `false` for a
/// cancellation that must not reach the SDK.
fn admit(link: &Arc<SessionLink>, message: &mut ClientJsonRpcMessage) -> bool {
    let book = &link.book;
    match message {
        JsonRpcMessage::Request(request) => {
            match &mut request.request {
                ClientRequest::CallToolRequest(call) => {
                    call.extensions.insert(book.issue(request.id.clone()));
                    // A 2026-07-28 connection's first call makes its session (no `initialize`).
                    call.extensions.insert(Arc::clone(link));
                }
                ClientRequest::InitializeRequest(init) => {
                    init.extensions.insert(Arc::clone(link));
                }
                _ => {}
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
