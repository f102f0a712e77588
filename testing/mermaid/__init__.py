"""The real Mermaid (what GitLab ships, and the newest 11.x) in headless Chromium."""
