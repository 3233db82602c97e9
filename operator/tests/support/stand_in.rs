//! An API stand-in (`tower_test::mock`) that answers a scripted list of requests in
//! order and fails on the first request that differs — or on any request after the
//! script ends, so "exactly these requests" is what a scenario proves.

use std::{future::Future, time::Duration};

use http::{Method, Request, Response};
use kube::{Client, client::Body};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// One expected request and how the stand-in answers it.
pub struct Expect {
    pub method: Method,
    pub path: String,
    /// Given the request body (JSON or null), returns the response body.
    pub respond: Box<dyn FnOnce(Value) -> Value + Send>,
}

pub fn expect(
    method: Method,
    path: &str,
    respond: impl FnOnce(Value) -> Value + Send + 'static,
) -> Expect {
    Expect {
        method,
        path: path.to_string(),
        respond: Box::new(respond),
    }
}

/// A list response of `kind` (e.g. `ContactList`) holding `items`.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "saint.work/v1alpha1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

pub fn to_value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
}

/// A status patch; the stand-in answers with `stored` carrying the patched status, as
/// the API server answers with the whole object.
pub fn status_expectation(
    path: &str,
    stored: Value,
    check: impl FnOnce(&Value) + Send + 'static,
) -> Expect {
    expect(Method::PATCH, path, move |body| {
        check(&body["status"]);
        let mut stored = stored;
        stored["status"] = body["status"].clone();
        stored
    })
}

/// An Event about `object` in namespace `acme`, with `reason` and `type_`.
pub fn object_event_expectation(
    object: &'static str,
    reason: &'static str,
    type_: &'static str,
) -> Expect {
    expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/acme/events",
        move |body| {
            assert_eq!(body["reason"], reason, "{body}");
            assert_eq!(body["type"], type_, "{body}");
            assert_eq!(body["regarding"]["name"], object, "{body}");
            body
        },
    )
}

/// The condition of type `type_` in a status.
pub fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|condition| condition["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

/// Answers requests in order, failing on the first one that differs from the scenario
/// and on any request after the last step (it waits until every client is dropped).
/// Returns the requests seen, as `METHOD path`.
async fn serve(mut handle: ApiHandle, steps: Vec<Expect>) -> Vec<String> {
    let mut seen = Vec::new();
    for (index, step) in steps.into_iter().enumerate() {
        let (request, send) = handle.next_request().await.unwrap_or_else(|| {
            panic!("step {index}: no request for {} {}", step.method, step.path)
        });
        assert_eq!(
            request.method(),
            step.method,
            "step {index}: {}",
            request.uri()
        );
        assert_eq!(request.uri().path(), step.path, "step {index}");
        seen.push(format!("{} {}", request.method(), request.uri().path()));
        if step.method == Method::PATCH {
            let query = request.uri().query().unwrap_or_default().to_string();
            assert!(
                query.contains("fieldManager=saint-operator") && query.contains("force=true"),
                "step {index}: {query}"
            );
        }
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let response = (step.respond)(body);
        // A `Status` object with a code is answered with that HTTP status, as the API server does.
        let code = match (&response["kind"], &response["code"]) {
            (Value::String(kind), Value::Number(code)) if kind == "Status" => {
                code.as_u64().unwrap() as u16
            }
            _ => 200,
        };
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&response).unwrap()))
                .unwrap(),
        );
    }
    if let Some((request, _)) = handle.next_request().await {
        panic!(
            "unexpected request after the last step: {} {}",
            request.method(),
            request.uri()
        );
    }
    seen
}

/// Runs `drive` with a client talking to the stand-in scripted by `steps`; the client
/// must be dropped when `drive` ends (hand it over, do not keep a clone). Returns what
/// `drive` returned and the requests the stand-in saw.
pub async fn with_stand_in<T, Drive, Driven>(steps: Vec<Expect>, drive: Drive) -> (T, Vec<String>)
where
    Drive: FnOnce(Client) -> Driven,
    Driven: Future<Output = T>,
{
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(serve(handle, steps));
    let result = tokio::time::timeout(Duration::from_secs(10), drive(client))
        .await
        .expect("the scenario finished in time");
    let seen = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("every expected request arrived and the client was dropped")
        .expect("the API stand-in saw exactly the expected requests");
    (result, seen)
}
