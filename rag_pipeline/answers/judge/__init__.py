"""The optional answer judge (docs/judge.md): an OpenAI-compatible chat client with a reply cache, the zh / en
prompts, and the faithfulness and refusal scores."""
