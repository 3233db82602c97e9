//! Embeddings from an OpenAI-compatible `POST …/v1/embeddings` endpoint (OpenAI,
//! vLLM, Ollama, LiteLLM). Sends only the texts and the model name.

use std::time::Duration;

use serde::Deserialize;

use super::{Embedder, EmbeddingError, normalise};

/// Texts per request; providers cap the batch (OpenAI: 2048 inputs).
const BATCH_SIZE: usize = 64;

/// An OpenAI-compatible embeddings endpoint.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    client: reqwest::blocking::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    dimensions: usize,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

/// `https://host/v1` and `https://host` both mean `https://host/v1/embeddings`.
fn endpoint_url(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/embeddings")
    } else {
        format!("{base}/v1/embeddings")
    }
}

impl OpenAiEmbedder {
    /// An embedder for `model` at `base_url`, returning vectors of `dimensions`.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        dimensions: usize,
    ) -> Result<Self, EmbeddingError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|error| {
                EmbeddingError::Remote(format!("failed to build the HTTP client: {error}"))
            })?;
        Ok(Self {
            client,
            url: endpoint_url(base_url),
            model: model.to_string(),
            api_key,
            dimensions,
        })
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let body =
            serde_json::json!({ "model": self.model, "input": texts, "encoding_format": "float" });
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .map_err(|error| EmbeddingError::Remote(error.without_url().to_string()))?;
        let status = response.status();
        if !status.is_success() {
            // The body may echo the request; only the status goes into the error.
            return Err(EmbeddingError::Remote(format!(
                "endpoint answered {status}"
            )));
        }
        let parsed: EmbeddingsResponse = response
            .json()
            .map_err(|error| EmbeddingError::Remote(format!("unreadable response: {error}")))?;
        if parsed.data.len() != texts.len() {
            return Err(EmbeddingError::Remote(format!(
                "asked for {} vectors, got {}",
                texts.len(),
                parsed.data.len()
            )));
        }
        let mut vectors = vec![Vec::new(); texts.len()];
        for item in parsed.data {
            if item.embedding.len() != self.dimensions {
                return Err(EmbeddingError::WrongDimensions {
                    expected: self.dimensions,
                    actual: item.embedding.len(),
                });
            }
            let slot = vectors.get_mut(item.index).ok_or_else(|| {
                EmbeddingError::Remote(format!("vector index {} out of range", item.index))
            })?;
            *slot = item.embedding;
        }
        for vector in &mut vectors {
            if vector.is_empty() {
                return Err(EmbeddingError::Remote(
                    "a vector index is missing from the response".to_string(),
                ));
            }
            normalise(vector);
        }
        Ok(vectors)
    }
}

impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> String {
        format!("openai:{}:{}", self.model, self.dimensions)
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH_SIZE) {
            vectors.extend(self.embed_batch(batch)?);
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead, BufReader, Read, Write},
        net::TcpListener,
        sync::mpsc,
        thread,
    };

    use super::*;

    #[test]
    fn endpoint_url_accepts_base_with_or_without_v1() {
        assert_eq!(
            endpoint_url("http://127.0.0.1:9/v1/"),
            "http://127.0.0.1:9/v1/embeddings"
        );
        assert_eq!(
            endpoint_url("http://127.0.0.1:9"),
            "http://127.0.0.1:9/v1/embeddings"
        );
    }

    /// Serves one HTTP request on loopback with `response_body`; returns the URL and a
    /// receiver for the raw request (headers and body).
    fn serve_once(status: &'static str, response_body: String) -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let address = listener.local_addr().expect("address");
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut head = String::new();
            let mut content_length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("read line");
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    content_length = value.trim().parse().expect("length");
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; content_length];
            reader.read_exact(&mut body).expect("body");
            head.push_str(&String::from_utf8_lossy(&body));
            sender.send(head).expect("send");
            let mut stream = stream;
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{response_body}",
                response_body.len()
            );
            stream.write_all(reply.as_bytes()).expect("write");
        });
        (format!("http://{address}/v1"), receiver)
    }

    #[test]
    fn posts_texts_and_returns_normalised_vectors_in_input_order() {
        // Items deliberately out of order: the embedder must sort by `index`.
        let body = r#"{"object":"list","data":[
            {"object":"embedding","index":1,"embedding":[0.0,2.0,0.0]},
            {"object":"embedding","index":0,"embedding":[3.0,0.0,4.0]}],"model":"m"}"#;
        let (url, requests) = serve_once("200 OK", body.to_string());
        let embedder = OpenAiEmbedder::new(&url, "acme-embed", Some("sk-test-123".to_string()), 3)
            .expect("client");
        let vectors = embedder.embed(&["first", "second"]).expect("embed");
        assert_eq!(vectors, vec![vec![0.6, 0.0, 0.8], vec![0.0, 1.0, 0.0]]);
        let request = requests.recv().expect("request");
        assert!(request.starts_with("POST /v1/embeddings "), "{request}");
        assert!(
            request
                .to_ascii_lowercase()
                .contains("authorization: bearer sk-test-123"),
            "{request}"
        );
        let json_start = request.find('{').expect("json body");
        let sent: serde_json::Value = serde_json::from_str(&request[json_start..]).expect("json");
        assert_eq!(sent["model"], "acme-embed");
        assert_eq!(sent["input"], serde_json::json!(["first", "second"]));
    }

    #[test]
    fn wrong_dimensions_and_http_errors_fail() {
        let body = r#"{"data":[{"index":0,"embedding":[1.0,0.0]}]}"#;
        let (url, _requests) = serve_once("200 OK", body.to_string());
        let embedder = OpenAiEmbedder::new(&url, "m", None, 3).expect("client");
        let error = embedder.embed(&["x"]).expect_err("dimension mismatch");
        assert!(
            matches!(
                error,
                EmbeddingError::WrongDimensions {
                    expected: 3,
                    actual: 2
                }
            ),
            "{error}"
        );

        let (url, _requests) = serve_once("500 Internal Server Error", "{}".to_string());
        let embedder = OpenAiEmbedder::new(&url, "m", None, 3).expect("client");
        let error = embedder.embed(&["x"]).expect_err("server error");
        assert!(error.to_string().contains("500"), "{error}");
    }
}
