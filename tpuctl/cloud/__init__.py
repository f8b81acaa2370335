"""Google Cloud as tpuctl reaches it, one subpackage per job: `auth` (credentials, IAM, the TPU service identity),
`nodes` (TPU VMs: the v2 API, a node's spec, its lifecycle and health, the run's label on it), `capacity` (where a
type can be had and at what price, and the hunt for it), `vertex` (Vertex AI's jobs and grants), and `plumbing`
(what every call shares: retries and the command's deadline, errors in a user's words, REST, the storage client).

Nothing here knows about runs or launches: a caller above hands in what a call needs and gets values back.
"""
