"""The Vercel AI SDK's UI message stream protocol, served over Forge sessions (issue 12)."""
