"""A Hearth server reached over HTTP and Server-Sent Events (DESIGN.md §11): the client (client.py), a server's
tasks with the names `rt.tasks` has (tasks.py), the facade's task names for a window (runtime.py) and the API tokens
kept in the system keyring (tokens.py). Light on purpose: httpx and httpx-sse, the event union and the records; none
of the runtime's engine, store or providers."""
