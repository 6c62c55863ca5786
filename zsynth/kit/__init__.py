"""The server kit both HTTP servers are built from: route declarations (:mod:`.endpoints`), access control, error
envelopes and middleware, connection limits, host checks, CORS, body parsing, the OpenAPI generator and the process
start-up (:mod:`.server`)."""
