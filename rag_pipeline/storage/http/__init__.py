"""The one outgoing HTTP client (answer endpoints, HTTP retrievers, judges): guard, retries, secrets."""
