"""The server host (issue 30, /work/shared/DESIGN.md §11): the turn engine behind HTTP, with its ports on Redis
(`redis/`: the resumable stream buffer, the task lease, the abort bus, the per-user feed) and PostgreSQL. The
desktop needs none of it."""
