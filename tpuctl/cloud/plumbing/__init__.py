"""What every Google API call of tpuctl's shares: retries and the one deadline a command's calls spend, bounded
replies, a failure said as one line a user can act on, JSON-over-HTTPS for APIs without a client library, and the
one way to a Cloud Storage client."""
