"""Git stage: resolve refs and keep one detached worktree per measured commit."""
