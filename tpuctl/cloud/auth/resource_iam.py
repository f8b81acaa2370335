"""IAM policies on single resources (a bucket, a service account), which Vertex AI jobs need beside
the project's: the same safe read-modify-write as tpuctl/cloud/auth/iam.py, on those resources' own APIs."""

from __future__ import annotations

from typing import Any

from tpuctl.cloud.auth.iam import ACT_AS, POLICY_VERSION, SA_DOMAIN, PolicyApi
from tpuctl.cloud.plumbing import api_errors
from tpuctl.inputs.errors import FAILED, AccessDenied, TpuctlError


class BucketIam(PolicyApi):
    """A bucket's IAM policy through the Cloud Storage JSON API (`storage/v1/b/B/iam`, etag; 412 on a stale one)."""

    service = "storage.googleapis.com"
    read_permission = "storage.buckets.getIamPolicy"
    write_permission = "storage.buckets.setIamPolicy"

    def __init__(self, identity: Any, endpoint: str, bucket: str, project: str) -> None:
        from tpuctl.cloud.plumbing.rest import RestApi

        self.api = RestApi(identity, endpoint)
        self.bucket = bucket
        self.project = project
        self.label = f"bucket gs://{bucket}"

    def _read(self) -> dict[str, Any]:
        return self.api.call("GET", f"storage/v1/b/{self.bucket}/iam?optionsRequestedPolicyVersion={POLICY_VERSION}")

    def _write(self, policy: dict[str, Any]) -> dict[str, Any]:
        return self.api.call("PUT", f"storage/v1/b/{self.bucket}/iam", policy)

    def _explain(self, exc: BaseException, *, writing: bool) -> TpuctlError:
        from google.api_core import exceptions as api

        if isinstance(exc, api.NotFound):
            return TpuctlError(
                f"bucket gs://{self.bucket} does not exist",
                hint=(
                    f"create it (gcloud storage buckets create gs://{self.bucket} --project {self.project} --location REGION)"
                    " or fix --staging-bucket/--model-dir"
                ),
                exit_code=FAILED,
            )
        error = super()._explain(exc, writing=writing)
        if isinstance(error, AccessDenied):
            hint = f"ask the owner of gs://{self.bucket} for roles/storage.admin on it"
            return AccessDenied(error.message.replace(f" in project {self.project}", ""), hint=hint)
        return error


class ServiceAccountIam(PolicyApi):
    """A service account's own IAM policy (IAM v1), where roles/iam.serviceAccountUser is granted on just that account."""

    service = "iam.googleapis.com"
    read_permission = "iam.serviceAccounts.getIamPolicy"
    write_permission = "iam.serviceAccounts.setIamPolicy"

    def __init__(self, identity: Any, endpoint: str, email: str, project: str) -> None:
        from tpuctl.cloud.plumbing.rest import RestApi

        self.api = RestApi(identity, endpoint)
        self.email = email
        self.project = project
        self.label = f"service account {email}"
        # `-` lets IAM find the account's project; a user-managed account's email names it.
        owner = email.partition("@")[2]
        self.path = f"v1/projects/{owner.removesuffix(SA_DOMAIN) if owner.endswith(SA_DOMAIN) else '-'}/serviceAccounts/{email}"

    def _read(self) -> dict[str, Any]:
        return self.api.call("POST", f"{self.path}:getIamPolicy?options.requestedPolicyVersion={POLICY_VERSION}")

    def _write(self, policy: dict[str, Any]) -> dict[str, Any]:
        return self.api.call("POST", f"{self.path}:setIamPolicy", {"policy": policy})

    def can_act_as(self) -> bool:
        """Whether the caller already holds iam.serviceAccounts.actAs on the account (from any role, at any level)."""
        where = self._where(f"test your permissions on {self.label}", "iam.serviceAccounts.get")
        try:
            reply = self.api.call("POST", f"{self.path}:testIamPermissions", {"permissions": [ACT_AS]})
        except Exception as exc:
            if api_errors.is_api_failure(exc):
                raise self._explain_test(exc, where) from None
            raise
        return ACT_AS in (reply.get("permissions") or [])

    def _explain_test(self, exc: BaseException, where: api_errors.Where) -> TpuctlError:
        from google.api_core import exceptions as api

        if isinstance(exc, api.NotFound):
            return TpuctlError(
                f"service account {self.email} does not exist",
                hint=f"create it (gcloud iam service-accounts create NAME --project {self.project}) or fix --service-account",
                exit_code=FAILED,
            )
        return api_errors.explain(exc, where)

    def _explain(self, exc: BaseException, *, writing: bool) -> TpuctlError:
        from google.api_core import exceptions as api

        if isinstance(exc, api.NotFound):
            return self._explain_test(exc, self._where("", ""))
        return super()._explain(exc, writing=writing)
