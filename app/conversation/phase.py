"""What a running turn is doing, in the words the line above a task's or chat's composer shows."""

PHASES = {
    "agent_building": "Preparing the agent…",
    "context_building": "Reading the conversation…",
    "mcp_connecting": "Connecting tools…",
    "agent_running": "Thinking…",
}
