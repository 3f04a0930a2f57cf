//! The importer's tests: documents in, entries and warnings out, and the TOML read back.

/// The HTTP upstream of an imported operation.
fn http(c: &crate::Capability) -> &capgate_provider::HttpUpstreamConfig {
    match &c.procedure {
        crate::Procedure::Http(h) => h,
        crate::Procedure::Mcp(m) => panic!("an OpenAPI import made an MCP entry: {m:?}"),
    }
}

use super::*;

fn doc(paths: Value, components: Value) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Pet Store", "version": "1" },
        "servers": [{ "url": "http://127.0.0.1:8080/v1" }],
        "paths": paths,
        "components": components,
    })
}

#[test]
fn references_are_inlined_and_cycles_and_external_ones_refused() {
    let d = doc(
        json!({ "/pets": { "get": {
            "operationId": "listPets",
            "responses": { "200": { "description": "ok", "content": { "application/json": {
                "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Pet" } } } } } }
        } } }),
        json!({ "schemas": {
            "Pet": { "type": "object", "properties": { "id": { "type": "string" }, "tag": { "$ref": "#/components/schemas/Tag" } } },
            "Tag": { "type": "string", "nullable": true },
        } }),
    );
    let got = import(&d, &Options::default()).expect("imported");
    assert!(got.warnings.is_empty(), "{:?}", got.warnings);
    let cap = &got.entries[0].capability;
    assert_eq!(cap.id, "pet_store.listPets");
    assert_eq!(
        cap.output_schema,
        Some(
            json!({ "type": "array", "items": { "type": "object", "properties": {
            "id": { "type": "string" }, "tag": { "type": ["string", "null"] } } } })
        )
    );
    // A cycle: an error naming the chain, not a hang.
    let cyclic = doc(
        json!({ "/pets": { "get": { "responses": { "200": { "description": "ok", "content": {
            "application/json": { "schema": { "$ref": "#/components/schemas/Node" } } } } } } } }),
        json!({ "schemas": { "Node": { "type": "object", "properties": {
            "next": { "$ref": "#/components/schemas/Node" } } } } }),
    );
    let got = import(&cyclic, &Options::default()).expect("imported");
    assert!(got.entries.is_empty());
    assert!(
        got.warnings[0].contains("cycle") && got.warnings[0].contains("/components/schemas/Node"),
        "{:?}",
        got.warnings
    );
    // An external reference.
    let external = doc(
        json!({ "/pets": { "get": { "responses": { "200": { "description": "ok", "content": {
            "application/json": { "schema": { "$ref": "pet.yaml#/Pet" } } } } } } } }),
        json!({}),
    );
    let got = import(&external, &Options::default()).expect("imported");
    assert!(got.warnings[0].contains("external"), "{:?}", got.warnings);
    // A reference that multiplies without a cycle is bounded.
    let mut schemas = Map::new();
    schemas.insert("L0".into(), json!({ "type": "string" }));
    for i in 1..40 {
        let prev = format!("#/components/schemas/L{}", i - 1);
        schemas.insert(
            format!("L{i}"),
            json!({ "allOf": [{ "$ref": prev }, { "$ref": prev }] }),
        );
    }
    let bomb = doc(
        json!({ "/x": { "get": { "responses": { "200": { "description": "ok", "content": {
            "application/json": { "schema": { "$ref": "#/components/schemas/L39" } } } } } } } }),
        json!({ "schemas": schemas }),
    );
    let got = import(&bomb, &Options::default()).expect("imported");
    assert!(
        got.warnings[0].contains("schema nodes"),
        "{:?}",
        got.warnings
    );
    // Issue 55: a document of 20 000 chained references (about 1 MB) is refused,
    // located, instead of overflowing the stack.
    let mut schemas = Map::new();
    schemas.insert("C0".into(), json!({ "type": "string" }));
    for i in 1..20_000 {
        schemas.insert(
            format!("C{i}"),
            json!({ "$ref": format!("#/components/schemas/C{}", i - 1) }),
        );
    }
    let chain = doc(
        json!({ "/x": { "get": { "responses": { "200": { "description": "ok", "content": {
            "application/json": { "schema": { "$ref": "#/components/schemas/C19999" } } } } } } } }),
        json!({ "schemas": schemas }),
    );
    assert!(chain.to_string().len() > 700_000);
    let got = import(&chain, &Options::default()).expect("imported");
    assert!(
        got.warnings[0].contains("chained more than 64 deep"),
        "{:?}",
        got.warnings
    );
}

#[test]
fn methods_decide_side_effect_idempotence_and_risk() {
    let op =
        |id: &str| json!({ "operationId": id, "responses": { "204": { "description": "done" } } });
    let d = doc(
        json!({ "/things": { "get": op("a"), "head": op("b"), "post": op("c"), "put": op("d"),
                              "patch": op("e"), "delete": op("f") } }),
        json!({}),
    );
    let got = import(&d, &Options::default()).expect("imported");
    let seen: Vec<(&str, &str, bool, &str)> = got
        .entries
        .iter()
        .map(|e| {
            let c = &e.capability;
            (
                e.source.split(' ').next().unwrap_or_default(),
                c.side_effect.as_str(),
                c.idempotent,
                c.risk.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("GET", "read", true, "low"),
            ("HEAD", "read", true, "low"),
            ("POST", "write", false, "medium"),
            ("PUT", "write", true, "medium"),
            ("PATCH", "write", false, "medium"),
            ("DELETE", "write", true, "high"),
        ]
    );
}

#[test]
fn parameters_body_and_errors_become_the_input_schema_and_mapping() {
    let d = doc(
        json!({ "/pets/{petId}": {
            "parameters": [{ "name": "petId", "in": "path", "required": true, "schema": { "type": "string" } }],
            "put": {
                "operationId": "update pet!",
                "parameters": [
                    { "name": "verbose", "in": "query", "schema": { "type": "boolean" } },
                    { "name": "X-Tenant", "in": "header", "required": true, "schema": { "type": "string" } },
                    { "name": "Accept", "in": "header", "schema": { "type": "string" } },
                ],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Pet" } } } },
                "responses": {
                    "200": { "description": "ok", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Pet" } } } },
                    "404": { "description": "Pet not found" },
                    "409": { "description": "" },
                    "500": { "description": "Server error" },
                }
            }
        } }),
        json!({ "schemas": { "Pet": { "type": "object", "properties": { "name": { "type": "string" } } } } }),
    );
    let got = import(
        &d,
        &Options {
            prefix: Some("acme pets".into()),
            ..Default::default()
        },
    )
    .expect("imported");
    let cap = &got.entries[0].capability;
    assert_eq!(cap.id, "acme_pets.update_pet");
    assert_eq!(http(cap).target, cap.id);
    assert_eq!(
        cap.input_schema,
        json!({ "type": "object", "additionalProperties": false,
            "properties": {
                "petId": { "type": "string" }, "verbose": { "type": "boolean" },
                "X-Tenant": { "type": "string" },
                "body": { "type": "object", "properties": { "name": { "type": "string" } } } },
            "required": ["petId", "X-Tenant", "body"] })
    );
    let request = http(cap).request.as_ref().expect("mapping");
    assert_eq!(request.method, "PUT");
    assert_eq!(request.path, "/pets/{petId}");
    assert_eq!(request.query, vec!["verbose".to_string()]);
    assert_eq!(
        request.headers.get("X-Tenant").map(String::as_str),
        Some("X-Tenant")
    );
    assert_eq!(request.body.as_deref(), Some("body"));
    assert_eq!(
        http(cap).errors,
        [
            ("404".to_string(), "PET_NOT_FOUND".to_string()),
            ("409".to_string(), "HTTP_409".to_string())
        ]
        .into()
    );
    // The TOML is what capgate.toml reads back.
    let text = crate::to_toml(&got.entries);
    assert!(
        text.starts_with("# PUT /pets/{petId}\n[[capabilities]]\n"),
        "{text}"
    );
    let back: Value = toml::from_str(&text).expect("TOML");
    assert_eq!(
        back["capabilities"][0]["procedure"]["http"]["request"]["method"],
        "PUT"
    );
    assert_eq!(back["capabilities"][0]["expose"], json!({}));
}

#[test]
fn the_toml_reads_back_as_the_entry() {
    let d = doc(
        json!({ "/a b/{weird key}": { "get": {
            "summary": "Say \"hi\"\\ then\nmore\u{7}",
            "parameters": [{ "name": "weird key", "in": "path", "required": true,
                "schema": { "type": "number", "minimum": 1.5, "maximum": 1e300, "enum": [1, 2.0] } }],
            "responses": { "200": { "description": "ok" } } } } }),
        json!({}),
    );
    let got = import(&d, &Options::default()).expect("imported");
    assert!(got.warnings.is_empty(), "{:?}", got.warnings);
    let back: Value = toml::from_str(&crate::to_toml(&got.entries)).expect("TOML");
    let cap = &got.entries[0].capability;
    assert_eq!(
        back["capabilities"][0]["description"],
        json!(cap.description)
    );
    assert_eq!(
        http(cap).request.as_ref().map(|r| r.path.as_str()),
        Some("/a%20b/{weird key}")
    );
    assert_eq!(back["capabilities"][0]["inputSchema"], cap.input_schema);
    assert_eq!(
        back["capabilities"][0]["procedure"],
        json!({ "http": serde_json::to_value(http(cap)).expect("json") })
    );
}

#[test]
fn unmappable_operations_are_skipped_with_a_reason() {
    let d = doc(
        json!({
            "/upload": { "post": { "operationId": "upload",
                "requestBody": { "content": { "multipart/form-data": { "schema": {} } } },
                "responses": { "200": { "description": "ok" } } } },
            "/page": { "get": { "operationId": "page",
                "responses": { "200": { "description": "ok", "content": { "text/html": {} } } } } },
            "/c": { "get": { "operationId": "cookie",
                "parameters": [{ "name": "s", "in": "cookie", "required": true }],
                "responses": { "200": { "description": "ok" } } } },
            "/ok": { "get": { "operationId": "ok", "responses": { "200": { "description": "ok" } } } },
        }),
        json!({}),
    );
    let got = import(&d, &Options::default()).expect("imported");
    assert_eq!(got.entries.len(), 1);
    assert_eq!(got.warnings.len(), 3, "{:?}", got.warnings);
    assert!(
        got.warnings
            .iter()
            .any(|w| w.contains("upload") && w.contains("multipart/form-data"))
    );
    assert!(
        got.warnings
            .iter()
            .any(|w| w.contains("page") && w.contains("text/html"))
    );
    assert!(got.warnings.iter().any(|w| w.contains("cookie")));
    // Selecting operations.
    let got = import(
        &d,
        &Options {
            operations: vec!["ok".into(), "nope".into()],
            ..Default::default()
        },
    )
    .expect("imported");
    assert_eq!(got.entries.len(), 1);
    assert!(got.warnings.iter().any(|w| w.contains("nope")));
}

#[test]
fn documents_that_are_not_openapi_3_are_refused_with_their_place() {
    assert!(matches!(
        import(&json!({ "swagger": "2.0" }), &Options::default()),
        Err(ImportError::Invalid { at, .. }) if at == "/openapi"
    ));
    assert!(matches!(
        import(&json!({ "openapi": "3.0.0", "paths": {} }), &Options::default()),
        Err(ImportError::Invalid { at, .. }) if at == "/servers"
    ));
    assert!(matches!(parse(b"{ nope"), Err(ImportError::Syntax(_))));
    assert!(matches!(
        parse(&vec![b' '; MAX_DOCUMENT_BYTES + 1]),
        Err(ImportError::TooLarge(_))
    ));
    // YAML, with the integer-looking status keys of real documents.
    let y = parse(b"openapi: 3.1.0\npaths:\n  /a:\n    get:\n      responses:\n        200:\n          description: ok\n")
        .expect("YAML");
    assert_eq!(
        y["paths"]["/a"]["get"]["responses"]["200"]["description"],
        "ok"
    );
}
