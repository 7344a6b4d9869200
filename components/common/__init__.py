"""Pieces shared by the components: config plumbing, artifact types, property keys."""
