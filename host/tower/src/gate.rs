//! The gate: which routes are governed ([`Gate`]), the layer that binds the wrapped
//! service ([`GateLayer`]) and the service that answers governed requests through the
//! runtime and passes every other one through ([`GateService`]).

use crate::Principal;
use crate::answer::{answer, refusal};
use crate::route::{Bound, RouteProcedure, Slot};
use axum_core::body::Body;
use bytes::Bytes;
use capgate_core::CancellationToken;
use capgate_core::actor::Surface;
use capgate_core::error::OPERATION_FAILED;
use capgate_core::procedure::Procedure;
use capgate_core::registry::CapabilityDef;
use capgate_core::runtime::{InvokeRequest, Runtime};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};

pub(crate) const LOG: &str = "capgate::tower";

/// A path no application has: asked for the application's own answer to an unknown path,
/// which a concealed governed route answers.
const CONCEALED_PATH: &str = "/.capgate/concealed-route-answers-as-an-unknown-path";

/// The default bound of a governed request's body and of the wrapped service's answer a
/// procedure reads: 1 MiB, the gateway's default body limit.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// How long an answer waits for the audit sinks to flush (the gateway's default drain).
const AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a [`Gate`] cannot become a layer: a declaration that would never govern what it
/// says, found before any request is served.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The path is not an absolute path without query or fragment.
    #[error(
        "`{method} {path}`: a governed route's path is an absolute path (`/orders/refund`) with no query or fragment"
    )]
    Path {
        /// The route's method.
        method: Method,
        /// The path as declared.
        path: String,
    },
    /// The same method and path were declared twice.
    #[error("`{method} {path}` is declared twice")]
    Duplicate {
        /// The route's method.
        method: Method,
        /// The route's path.
        path: String,
    },
    /// The runtime's registry has no capability of that id: the route's definition was
    /// never added to the registry.
    #[error("capability `{capability}` of `{method} {path}` is not in the runtime's registry")]
    NotRegistered {
        /// The capability id.
        capability: String,
        /// The route's method.
        method: Method,
        /// The route's path.
        path: String,
    },
    /// The registered capability does not run this route's procedure (its procedure was
    /// replaced after [`Gate::route`]).
    #[error("capability `{capability}` does not run the procedure `Gate::route` gave it")]
    ProcedureReplaced {
        /// The capability id.
        capability: String,
    },
    /// The capability is not exposed on the gate's surface, so every call would be
    /// refused as not found.
    #[error("capability `{capability}` is not exposed on the gate's surface `{surface}`")]
    NotExposed {
        /// The capability id.
        capability: String,
        /// The gate's surface.
        surface: Surface,
    },
}

/// One declared route.
struct Declared {
    method: Method,
    path: String,
    capability_id: String,
    procedure: Arc<dyn Procedure>,
}

/// The governed routes of one service, declared before the registry is built: each
/// [`Gate::route`] gives its capability the procedure that calls the wrapped service, and
/// [`Gate::into_layer`] checks the declarations against the built runtime.
pub struct Gate {
    surface: Surface,
    routes: Vec<Declared>,
    slot: Slot,
    max_body_bytes: usize,
    max_output_bytes: usize,
}

impl Gate {
    /// A gate whose calls come through `surface` (the door's fixed surface: each governed
    /// capability must be exposed on it).
    pub fn new(surface: Surface) -> Self {
        Gate {
            surface,
            routes: Vec::new(),
            slot: Arc::new(OnceLock::new()),
            max_body_bytes: DEFAULT_MAX_BYTES,
            max_output_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// The largest governed request body read (default 1 MiB); a larger one is `413`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The largest answer of the wrapped service a procedure reads (default 1 MiB); a
    /// larger one fails the call.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Govern `method path` as the capability `def`: requests to exactly this method and
    /// path (no query string) become calls of `def.id` with the JSON body as input. Returns
    /// `def` with its procedure set to the wrapped service (replacing any it had), to add
    /// to the registry.
    pub fn route(&mut self, method: Method, path: &str, def: CapabilityDef) -> CapabilityDef {
        let procedure: Arc<dyn Procedure> = Arc::new(RouteProcedure {
            method: method.clone(),
            path: path.to_owned(),
            capability_id: def.id.clone(),
            slot: self.slot.clone(),
        });
        self.routes.push(Declared {
            method,
            path: path.to_owned(),
            capability_id: def.id.clone(),
            procedure: procedure.clone(),
        });
        def.procedure_arc(procedure)
    }

    /// The layer of these routes over `runtime`, once every route is an absolute path,
    /// declared once, and its capability is in the runtime's registry, runs the route's
    /// procedure and is exposed on the gate's surface.
    pub fn into_layer(self, runtime: Runtime) -> Result<GateLayer, GateError> {
        let mut routes: HashMap<Method, HashMap<String, String>> = HashMap::new();
        for d in self.routes {
            let absolute = d.path.starts_with('/')
                && Uri::try_from(d.path.as_str())
                    .is_ok_and(|u| u.path() == d.path && u.query().is_none());
            if !absolute {
                return Err(GateError::Path {
                    method: d.method,
                    path: d.path,
                });
            }
            let Some(capability) = runtime.registry().get(&d.capability_id) else {
                return Err(GateError::NotRegistered {
                    capability: d.capability_id,
                    method: d.method,
                    path: d.path,
                });
            };
            // The same allocation, compared without the vtable (which may be duplicated).
            if !std::ptr::addr_eq(
                Arc::as_ptr(&capability.procedure),
                Arc::as_ptr(&d.procedure),
            ) {
                return Err(GateError::ProcedureReplaced {
                    capability: d.capability_id,
                });
            }
            if !capability.meta.expose.allows(self.surface) {
                return Err(GateError::NotExposed {
                    capability: d.capability_id,
                    surface: self.surface,
                });
            }
            let by_path = routes.entry(d.method.clone()).or_default();
            if by_path.contains_key(&d.path) {
                return Err(GateError::Duplicate {
                    method: d.method,
                    path: d.path,
                });
            }
            by_path.insert(d.path, d.capability_id);
        }
        Ok(GateLayer {
            state: Arc::new(State {
                runtime,
                surface: self.surface,
                routes,
                max_body_bytes: self.max_body_bytes,
                slot: self.slot.clone(),
            }),
            slot: self.slot,
            max_output_bytes: self.max_output_bytes,
        })
    }
}

/// What every clone of the gate's service shares.
struct State {
    runtime: Runtime,
    surface: Surface,
    /// Method, then exact path, to the capability id.
    routes: HashMap<Method, HashMap<String, String>>,
    max_body_bytes: usize,
    /// The wrapped service, once bound: what answers a concealed route as it answers a
    /// path it does not have.
    slot: Slot,
}

/// The tower [`Layer`] of a [`Gate`]: wraps one service, which becomes the procedure of
/// every governed route. Not `Clone` on purpose: it binds exactly one service, so wrap the
/// whole application with it, never each route (`Router::layer` would).
pub struct GateLayer {
    state: Arc<State>,
    slot: Slot,
    max_output_bytes: usize,
}

impl<S, B> Layer<S> for GateLayer
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> GateService<S> {
        let service = BoxCloneSyncService::new(
            inner
                .clone()
                .map_response(|r: Response<B>| r.map(Body::new))
                .map_err(|e: S::Error| -> BoxError { e.into() }),
        );
        let bound = self
            .slot
            .set(Bound {
                service,
                max_output_bytes: self.max_output_bytes,
            })
            .is_ok();
        if !bound {
            // A second service would not be the one the procedures call: its governed
            // routes fail closed.
            tracing::error!(target: LOG, "a GateLayer wrapped a second service; its governed routes answer 500 (wrap the whole application once)");
        }
        GateService {
            inner,
            state: self.state.clone(),
            bound,
        }
    }
}

/// The wrapped service behind the gate: a request to a governed route is answered through
/// the runtime (see the crate docs); any other request is the wrapped service's, untouched.
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    state: Arc<State>,
    /// Whether `inner` is the service the procedures call.
    bound: bool,
}

impl<S, B> Service<Request<Body>> for GateService<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match self.state.lookup(request.method(), request.uri().path()) {
            Lookup::Ungoverned => {
                let answer = self.inner.call(request);
                Box::pin(async move { answer.await.map(|r| r.map(Body::new)) })
            }
            Lookup::Refused(status) => {
                // Another spelling of a governed route (`/orders//refund`, `/orders/refund/`,
                // `/orders/%72efund`, `HEAD` of a governed `GET`): the application might
                // route it to the governed handler, so it never reaches the application.
                let answer = refusal(
                    status,
                    "BAD_REQUEST",
                    "Send a governed route with its declared method and spelling.",
                );
                Box::pin(async move { Ok(answer) })
            }
            Lookup::Governed(capability_id) => {
                let state = self.state.clone();
                let bound = self.bound;
                Box::pin(async move { Ok(state.govern(capability_id, request, bound).await) })
            }
        }
    }
}

/// What the gate makes of a request's method and path.
enum Lookup {
    /// Not a governed route in any spelling: the application's.
    Ungoverned,
    /// Exactly a governed route: this capability.
    Governed(String),
    /// Another spelling of a governed route: refused with this status.
    Refused(StatusCode),
}

/// `path` as a router that is lenient about spelling could read it: `%XX` of an unreserved
/// character decoded, empty and `.` segments dropped, `..` resolved, no trailing slash. Two
/// spellings an application may route to one handler have one canonical form.
fn canonical_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(v)
                if bytes[i] == b'%'
                    && (v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~')) =>
            {
                decoded.push(v);
                i += 3;
            }
            _ => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    format!("/{}", segments.join("/"))
}

impl State {
    /// Whether `method path` is governed: exactly a declared route, another spelling of one
    /// (refused), or neither.
    fn lookup(&self, method: &Method, path: &str) -> Lookup {
        if let Some(id) = self
            .routes
            .get(method)
            .and_then(|by_path| by_path.get(path))
        {
            return Lookup::Governed(id.clone());
        }
        // `HEAD` is answered by a router's `GET` handler.
        if method == Method::HEAD
            && self
                .routes
                .get(&Method::GET)
                .is_some_and(|by_path| by_path.contains_key(&canonical_path(path)))
        {
            return Lookup::Refused(StatusCode::METHOD_NOT_ALLOWED);
        }
        let canonical = canonical_path(path);
        if canonical != path
            && let Some(by_path) = self.routes.get(method)
            && by_path.contains_key(&canonical)
        {
            return Lookup::Refused(StatusCode::BAD_REQUEST);
        }
        Lookup::Ungoverned
    }

    /// A governed request: the door's refusals, then the runtime's call and its answer.
    async fn govern(
        self: Arc<Self>,
        capability_id: String,
        request: Request<Body>,
        bound: bool,
    ) -> Response<Body> {
        if !bound {
            return refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                OPERATION_FAILED,
            );
        }
        let (parts, body) = request.into_parts();
        if parts.uri.query().is_some() {
            return refusal(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                "A governed route takes its input from the JSON body alone, not a query string.",
            );
        }
        let Some(principal) = parts.extensions.get::<Principal>().cloned() else {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                "Authentication is required.",
            );
        };
        if !is_json(&parts.headers) {
            return refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                "A governed route takes a JSON body with Content-Type: application/json.",
            );
        }
        let input = match read_json(body, &parts.headers, self.max_body_bytes).await {
            Ok(input) => input,
            Err(refused) => return refused,
        };
        let (method, headers) = (parts.method.clone(), parts.headers.clone());
        let cancel = CancellationToken::new();
        // Fires if this answer is dropped (the client went away) before the call ended.
        let on_drop = cancel.clone().drop_guard();
        let invoke = InvokeRequest::new(self.surface, capability_id, input, principal.actor)
            .namespace(principal.namespace)
            .context(principal.context)
            .cancel(cancel);
        let state = self.clone();
        // On a task of its own, so a cancelled call still runs to its end and is audited.
        let run = tokio::spawn(capgate_core::trace::in_current_trace(async move {
            let result = state.runtime.invoke(invoke).await;
            state.drain_audit().await;
            result
        }));
        let joined = run.await;
        let _ = on_drop.disarm();
        match joined {
            // Concealed (unexposed, hidden, refused as not found): answered exactly as the
            // application answers a path it does not have, never with capgate's own 404.
            Ok(result)
                if result.error().is_some_and(|e| {
                    e.code() == capgate_core::error::ErrorCode::CapabilityNotFound
                }) =>
            {
                self.unknown_path(method, &headers).await
            }
            Ok(result) => answer(&result),
            Err(e) => {
                tracing::error!(target: LOG, error = %e, "a governed call's task failed");
                refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "INTERNAL_ERROR",
                    OPERATION_FAILED,
                )
            }
        }
    }

    /// The wrapped application's answer to `method` of a path it does not have, with the
    /// request's headers (not its body): what a concealed governed route answers, so its
    /// caller cannot tell it from a route that does not exist (SI-8). A bare `404` (axum's
    /// own fallback) if the application cannot be asked.
    async fn unknown_path(&self, method: Method, headers: &HeaderMap) -> Response<Body> {
        let bare = || {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        };
        let Some(bound) = self.slot.get() else {
            return bare();
        };
        let mut request = Request::new(Body::empty());
        *request.method_mut() = method;
        *request.uri_mut() = Uri::from_static(CONCEALED_PATH);
        for (name, value) in headers {
            if name != header::CONTENT_LENGTH
                && name != header::CONTENT_TYPE
                && name != header::TRANSFER_ENCODING
            {
                request.headers_mut().append(name.clone(), value.clone());
            }
        }
        match bound.service.clone().oneshot(request).await {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!(target: LOG, error = %e, "the application could not answer an unknown path");
                bare()
            }
        }
    }

    /// Wait (bounded) for the audit sinks, so the trail is written before the answer.
    async fn drain_audit(&self) {
        match tokio::time::timeout(AUDIT_DRAIN_TIMEOUT, self.runtime.drain_audit()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(target: LOG, error = %e, "audit drain failed"),
            Err(_) => tracing::error!(target: LOG, "audit drain timed out"),
        }
    }
}

/// Whether the request says its body is JSON (`application/json` or `application/*+json`).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .is_some_and(|m| {
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
}

/// The body as JSON, read up to `max` bytes: `413` over it, `400` when it is empty,
/// unreadable or not JSON.
async fn read_json(
    body: Body,
    headers: &HeaderMap,
    max: usize,
) -> Result<serde_json::Value, Response<Body>> {
    let too_large = || {
        refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            &format!("The request body is larger than {max} bytes."),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Err(_) => {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                "The request body could not be read.",
            ));
        }
    };
    if bytes.is_empty() {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "A governed route needs a JSON body.",
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        refusal(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            &format!("The request body is not JSON: {e}."),
        )
    })
}
