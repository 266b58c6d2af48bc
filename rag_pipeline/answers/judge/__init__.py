"""The optional answer judge (docs/judge.md): chat client and cache, prompts, scores."""
