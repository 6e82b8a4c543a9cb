"""The Textual application: the app, the replay screen, the shell, idle collection."""
