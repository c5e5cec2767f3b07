//! The discovery endpoints (RFC 7644 §4, RFC 7643 §5–7): `/ServiceProviderConfig`,
//! `/ResourceTypes` and `/Schemas`, generated from the attribute tables in [`crate::schema`]
//! so that what is announced is what the crate does.

use serde_json::{Map, Value, json};

use crate::list::{ListResponse, MAX_PAGE_SIZE, Page};
use crate::meta::scim_root;
use crate::patch::MAX_PATCH_OPERATIONS;
use crate::schema::{self, Attribute, AttributeType, ResourceType, Schema};

/// The ServiceProviderConfig schema URN.
pub const SERVICE_PROVIDER_CONFIG_SCHEMA: &str =
    "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig";
/// The ResourceType schema URN.
pub const RESOURCE_TYPE_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:ResourceType";
/// The Schema schema URN.
pub const SCHEMA_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Schema";

/// `GET /ServiceProviderConfig`: PATCH yes, bulk no, filter yes (at most [`MAX_PAGE_SIZE`]
/// results a page), password change no, sort no, ETags yes (every resource has a
/// `meta.version`), and the organization's API key as an OAuth bearer token.
pub fn service_provider_config(base_url: &str) -> Value {
    json!({
        "schemas": [SERVICE_PROVIDER_CONFIG_SCHEMA],
        "patch": {"supported": true},
        "bulk": {"supported": false, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": true, "maxResults": MAX_PAGE_SIZE},
        "changePassword": {"supported": false},
        "sort": {"supported": false},
        "etag": {"supported": true},
        "authenticationSchemes": [{
            "type": "oauthbearertoken",
            "name": "OAuth Bearer Token",
            "description": format!(
                "An API key of the organization as a bearer token (Authorization: Bearer fsk_…). \
                 PATCH requests hold at most {MAX_PATCH_OPERATIONS} operations."
            ),
            "specUri": "https://www.rfc-editor.org/info/rfc6750",
            "primary": true
        }],
        "meta": {
            "resourceType": "ServiceProviderConfig",
            "location": format!("{}/ServiceProviderConfig", scim_root(base_url))
        }
    })
}

/// One `/ResourceTypes/{name}` document.
pub fn resource_type(base_url: &str, resource: ResourceType) -> Value {
    let extensions: Vec<Value> = resource
        .extensions()
        .iter()
        .map(|extension| json!({"schema": extension.id, "required": false}))
        .collect();
    let mut document = json!({
        "schemas": [RESOURCE_TYPE_SCHEMA],
        "id": resource.name(),
        "name": resource.name(),
        "endpoint": resource.endpoint(),
        "description": resource.schema().description,
        "schema": resource.schema().id,
        "meta": {
            "resourceType": "ResourceType",
            "location": format!("{}/ResourceTypes/{}", scim_root(base_url), resource.name())
        }
    });
    if !extensions.is_empty() {
        document["schemaExtensions"] = Value::Array(extensions);
    }
    document
}

/// The resource type named `name` (case-insensitively), for `/ResourceTypes/{name}`.
pub fn find_resource_type(name: &str) -> Option<ResourceType> {
    ResourceType::ALL
        .into_iter()
        .find(|resource| resource.name().eq_ignore_ascii_case(name))
}

/// `GET /ResourceTypes`: User (with the enterprise and Flow extensions) and Group.
pub fn resource_types(base_url: &str) -> Value {
    let documents: Vec<Value> = ResourceType::ALL
        .iter()
        .map(|resource| resource_type(base_url, *resource))
        .collect();
    whole_list(documents)
}

/// One `/Schemas/{id}` document.
pub fn schema_document(base_url: &str, schema: &Schema) -> Value {
    json!({
        "schemas": [SCHEMA_SCHEMA],
        "id": schema.id,
        "name": schema.name,
        "description": schema.description,
        "attributes": schema.attributes.iter().map(attribute_document).collect::<Vec<_>>(),
        "meta": {
            "resourceType": "Schema",
            "location": format!("{}/Schemas/{}", scim_root(base_url), schema.id)
        }
    })
}

/// The schema with URN `id` (case-insensitively), for `/Schemas/{id}`.
pub fn find_schema(id: &str) -> Option<&'static Schema> {
    schema::ALL
        .into_iter()
        .find(|schema| schema.id.eq_ignore_ascii_case(id))
}

/// `GET /Schemas`: the User, enterprise User, Flow User and Group schemas, each with the
/// attributes Flow supports.
pub fn schemas(base_url: &str) -> Value {
    let documents: Vec<Value> = schema::ALL
        .iter()
        .map(|schema| schema_document(base_url, schema))
        .collect();
    whole_list(documents)
}

fn whole_list(documents: Vec<Value>) -> Value {
    let total = documents.len() as u64;
    ListResponse::new(Page::default(), total, documents).to_json()
}

fn attribute_document(attribute: &Attribute) -> Value {
    let mut document = Map::new();
    document.insert("name".into(), json!(attribute.name));
    document.insert("type".into(), json!(attribute.kind.as_str()));
    document.insert("multiValued".into(), json!(attribute.multi_valued));
    document.insert("description".into(), json!(attribute.description));
    document.insert("required".into(), json!(attribute.required));
    if attribute.kind != AttributeType::Complex {
        document.insert("caseExact".into(), json!(attribute.case_exact));
    }
    document.insert("mutability".into(), json!(attribute.mutability.as_str()));
    document.insert("returned".into(), json!(attribute.returned.as_str()));
    document.insert("uniqueness".into(), json!(attribute.uniqueness.as_str()));
    if !attribute.canonical_values.is_empty() {
        document.insert("canonicalValues".into(), json!(attribute.canonical_values));
    }
    if attribute.kind == AttributeType::Reference {
        document.insert("referenceTypes".into(), json!(attribute.reference_types));
    }
    if attribute.kind == AttributeType::Complex {
        document.insert(
            "subAttributes".into(),
            Value::Array(
                attribute
                    .sub_attributes
                    .iter()
                    .map(attribute_document)
                    .collect(),
            ),
        );
    }
    Value::Object(document)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "https://flow.example.com";

    #[test]
    fn service_provider_config_announces_what_is_supported() {
        let config = service_provider_config(BASE);
        assert_eq!(config["schemas"], json!([SERVICE_PROVIDER_CONFIG_SCHEMA]));
        assert_eq!(config["patch"], json!({"supported": true}));
        assert_eq!(config["bulk"]["supported"], json!(false));
        assert_eq!(
            config["filter"],
            json!({"supported": true, "maxResults": 200})
        );
        assert_eq!(config["changePassword"], json!({"supported": false}));
        assert_eq!(config["sort"], json!({"supported": false}));
        assert_eq!(config["etag"], json!({"supported": true}));
        assert_eq!(
            config["authenticationSchemes"][0]["type"],
            json!("oauthbearertoken")
        );
        assert_eq!(
            config["meta"]["location"],
            json!("https://flow.example.com/scim/v2/ServiceProviderConfig")
        );
    }

    #[test]
    fn resource_types_list_user_with_extensions_and_group() {
        let list = resource_types(BASE);
        assert_eq!(list["totalResults"], json!(2));
        assert_eq!(list["itemsPerPage"], json!(2));
        let user = &list["Resources"][0];
        assert_eq!(user["id"], json!("User"));
        assert_eq!(user["endpoint"], json!("/Users"));
        assert_eq!(
            user["schema"],
            json!("urn:ietf:params:scim:schemas:core:2.0:User")
        );
        assert_eq!(
            user["schemaExtensions"],
            json!([
                {"schema": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User", "required": false},
                {"schema": "urn:ietf:params:scim:schemas:extension:flow:2.0:User", "required": false}
            ])
        );
        assert_eq!(
            user["meta"]["location"],
            json!("https://flow.example.com/scim/v2/ResourceTypes/User")
        );
        let group = &list["Resources"][1];
        assert_eq!(group["endpoint"], json!("/Groups"));
        assert!(group.get("schemaExtensions").is_none());
        assert_eq!(find_resource_type("group"), Some(ResourceType::Group));
        assert_eq!(find_resource_type("Widget"), None);
    }

    #[test]
    fn schemas_describe_the_supported_attributes() {
        let list = schemas(BASE);
        let ids: Vec<&str> = list["Resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|schema| schema["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            vec![
                "urn:ietf:params:scim:schemas:core:2.0:User",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User",
                "urn:ietf:params:scim:schemas:extension:flow:2.0:User",
                "urn:ietf:params:scim:schemas:core:2.0:Group",
            ]
        );
        let user = &list["Resources"][0];
        let user_name = &user["attributes"][0];
        assert_eq!(user_name["name"], json!("userName"));
        assert_eq!(user_name["required"], json!(true));
        assert_eq!(user_name["uniqueness"], json!("server"));
        assert_eq!(user_name["caseExact"], json!(false));
        let emails = user["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|attribute| attribute["name"] == "emails")
            .unwrap();
        assert_eq!(emails["multiValued"], json!(true));
        assert_eq!(emails["type"], json!("complex"));
        assert_eq!(
            emails["subAttributes"][1]["canonicalValues"],
            json!(["work", "home", "other"])
        );
        let manager = &list["Resources"][1]["attributes"][2];
        assert_eq!(
            manager["subAttributes"][1]["referenceTypes"],
            json!(["User"])
        );
        let document = schema_document(
            BASE,
            find_schema("URN:IETF:PARAMS:SCIM:SCHEMAS:CORE:2.0:GROUP").unwrap(),
        );
        assert_eq!(
            document["meta"]["location"],
            json!(
                "https://flow.example.com/scim/v2/Schemas/urn:ietf:params:scim:schemas:core:2.0:Group"
            )
        );
        assert!(find_schema("urn:example:nothing").is_none());
    }
}
