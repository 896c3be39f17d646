"""Host access: runtime users, SSH access credentials, authorized keys, the web terminal."""
