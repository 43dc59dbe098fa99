-- Argo CD health for ray.io/RayJob (Argo CD ships none). Installed by argocd-cm.yaml under
-- resource.customizations.health.ray.io_RayJob; kept here too so tests can run it.
-- jobDeploymentStatus says where the RayJob is; jobStatus is Ray's own verdict on the job.
local hs = {}
if obj.status == nil or obj.status.jobDeploymentStatus == nil or obj.status.jobDeploymentStatus == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the KubeRay operator"
  return hs
end
local deployment = obj.status.jobDeploymentStatus
local job = obj.status.jobStatus or ""
local detail = ""
if obj.status.reason ~= nil and obj.status.reason ~= "" then
  detail = ": " .. obj.status.reason
end
if obj.status.message ~= nil and obj.status.message ~= "" then
  detail = detail .. " " .. obj.status.message
end
if deployment == "Complete" then
  if job == "SUCCEEDED" then
    hs.status = "Healthy"
    hs.message = "Training finished: SUCCEEDED"
  else
    hs.status = "Degraded"
    hs.message = "Job ended " .. job .. detail
  end
elseif deployment == "Failed" or deployment == "ValidationFailed" then
  hs.status = "Degraded"
  hs.message = deployment .. detail
elseif deployment == "Suspended" or deployment == "Suspending" then
  hs.status = "Suspended"
  hs.message = deployment .. " (waiting for Kueue admission or spec.suspend)"
else
  -- Initializing, Running, Retrying (a backoffLimit retry), Waiting
  hs.status = "Progressing"
  hs.message = deployment .. (job ~= "" and (", job " .. job) or "")
end
return hs
