"""Publishing: the GitHub client that posts and updates the PR comment."""
