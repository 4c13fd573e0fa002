"""Protocol knowledge kept across processes: ``Client(state=path)`` and the CLI's ``--state``.

- ``file.py``       the file: its format, reading it warily, writing it atomically (0600,
                    bounded, merged under a lock with what other clients wrote)
- ``trust.py``      the fingerprint of the trust settings every entry is bound to
- ``memory.py``     one client's knowledge in memory (what its connections take and keep)
"""
