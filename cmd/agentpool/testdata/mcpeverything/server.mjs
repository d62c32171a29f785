// The reference "everything" MCP server over stdio, as the daemon runs it
// for TestSharedMCPRealServer.
import "@modelcontextprotocol/server-everything/dist/index.js";
