//! `hanzo-edge mcp`: the device's local tools for MCP clients, over stdio (rmcp, the
//! official SDK). Only the tools granted with `--allow` are listed or callable.

use clap::Args;
use hanzo_edge::tools::{LocalTool, LocalTools};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use std::path::PathBuf;

#[derive(Args)]
pub struct McpArgs {
    /// The folder the file tools are confined to.
    #[arg(long)]
    sandbox: PathBuf,
    /// The tools to offer (comma-separated): file_read, file_write, file_list.
    #[arg(long, value_delimiter = ',', required = true)]
    allow: Vec<LocalTool>,
    /// Largest file written, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_write_bytes: u64,
}

pub fn mcp(a: McpArgs) -> anyhow::Result<()> {
    let tools = super::local_tools(Some(&a.sandbox), &a.allow, a.max_write_bytes)?;
    tracing::info!("MCP on stdio: {:?}", tools.available());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let service = EdgeTools(tools)
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| anyhow::anyhow!("MCP handshake on stdio failed: {e}"))?;
            service
                .waiting()
                .await
                .map_err(|e| anyhow::anyhow!("MCP session failed: {e}"))?;
            Ok(())
        })
}

/// The granted tools as an MCP server.
#[derive(Clone)]
struct EdgeTools(LocalTools);

impl ServerHandler for EdgeTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("hanzo-edge", env!("CARGO_PKG_VERSION")))
            .with_instructions("Files in one folder on this device, as far as the user allowed.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .0
            .definitions()
            .into_iter()
            .map(|d| {
                let f = &d["function"];
                let schema = f["parameters"].as_object().cloned().unwrap_or_default();
                let name = f["name"].as_str().unwrap_or_default().to_string();
                let description = f["description"].as_str().unwrap_or_default().to_string();
                Tool::new(name, description, schema)
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let result = match self.0.call(&request.name, &args) {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            // A refusal is a result the client's model reads, not a protocol error.
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        };
        tracing::info!(
            "{}: {}",
            request.name,
            if result.is_error == Some(true) {
                "refused"
            } else {
                "done"
            }
        );
        Ok(result.into())
    }
}
