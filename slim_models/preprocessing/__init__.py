"""Image preprocessing per model family (TF-Slim's preprocessing factory)."""
