"""Drives `autothread serve` with the real Agent Protocol client (agent-protocol-client 1.1.0).

Run by tests/it/api_e2e.rs with: BASE_URL CI_TOKEN OTHER_TOKEN, against the scripted fake model,
which proposes, in order: for the first task write_file(haiku.txt), read_file(inbox/notes.txt),
ask_user, write_file(draft.txt), finish; for the second, 25 write_file commands.
Any failed expectation raises, and the process exits non-zero.
"""

import asyncio
import os
import sys
import tempfile

from agent_protocol_client import AgentApi, ApiClient, Configuration
from agent_protocol_client.exceptions import ApiException
from agent_protocol_client.models import StepRequestBody, TaskRequestBody

POEM = "Ferris scuttles on\nborrowed memory \u2014 \u00fcn\u00efcode\n\U0001F980 no data races\n"
NOTES = b"first line\r\nsecond line with a tab\there\n"


def client(base, token):
    headers = ("Authorization", "Bearer " + token) if token else (None, None)
    return ApiClient(Configuration(host=base), header_name=headers[0], header_value=headers[1])


async def status_of(call):
    try:
        await call
    except ApiException as e:
        return e.status
    raise AssertionError("the call succeeded")


async def step(api, task_id, text=None):
    body = StepRequestBody(input=text) if text is not None else None
    return await api.execute_agent_task_step(task_id=task_id, step_request_body=body)


async def whole_task(api, other, anonymous, files):
    task = await api.create_agent_task(
        task_request_body=TaskRequestBody(
            input="Write a haiku into haiku.txt",
            additional_input={"name": "Scribe", "role": "writes files"},
        )
    )
    task_id = task.task_id
    first = await step(api, task_id)
    assert first.step_id == "1" and first.name == "write_file", first
    assert first.status == "completed" and not first.is_last, first

    second = await step(api, task_id, "")
    assert second.name == "read_file", second
    assert second.additional_output["last_command"]["status"] == "success", second

    listed = await api.list_agent_task_artifacts(task_id=task_id)
    haiku = [a for a in listed.artifacts if a.file_name == "haiku.txt"]
    assert len(haiku) == 1, listed
    got = await api.download_agent_task_artifact(task_id=task_id, artifact_id=haiku[0].artifact_id)
    assert bytes(got) == POEM.encode(), got

    notes = os.path.join(files, "notes.txt")
    with open(notes, "wb") as f:
        f.write(NOTES)
    uploaded = await api.upload_agent_task_artifacts(task_id=task_id, file=notes, relative_path="inbox")
    assert uploaded.file_name == "notes.txt" and uploaded.relative_path == "inbox", uploaded
    assert not uploaded.agent_created

    third = await step(api, task_id, "y")
    assert third.name == "ask_user", third
    assert "second line" in third.additional_output["last_command"]["result"], third

    asked = await step(api, task_id)
    assert asked.additional_output["question"] == "Which colour?", asked
    answered = await step(api, task_id, "Blue")
    assert answered.name == "write_file", answered
    assert "Blue" in answered.additional_output["last_command"]["result"], answered

    fed_back = await step(api, task_id, "No more files, please.")
    assert fed_back.name == "finish", fed_back
    assert fed_back.additional_output["last_command"]["status"] == "interrupted_by_human"

    last = await step(api, task_id)
    assert last.is_last, last

    # Access: no token, another caller's task, an upload outside the workspace.
    assert await status_of(anonymous.list_agent_tasks()) == 401
    assert await status_of(other.get_agent_task(task_id=task_id)) == 404
    assert await status_of(
        api.upload_agent_task_artifacts(task_id=task_id, file=notes, relative_path="../..")
    ) == 422
    names = [a.file_name for a in (await api.list_agent_task_artifacts(task_id=task_id)).artifacts]
    assert sorted(names) == ["haiku.txt", "notes.txt"], names
    print("whole task: ok")


async def paging(api):
    # Named, so that the agent needs no profile call (the fake model scripts cycles only).
    task = await api.create_agent_task(
        task_request_body=TaskRequestBody(
            input="Write files", additional_input={"name": "Pager", "role": "writes files"}
        )
    )
    await step(api, task.task_id)
    for n in range(1, 25):
        await step(api, task.task_id, "try again, %d" % n)
    seen = []
    for page in (1, 2, 3):
        listed = await api.list_agent_task_steps(task_id=task.task_id, current_page=page, page_size=10)
        assert listed.pagination.total_items == 25, listed.pagination
        assert listed.pagination.total_pages == 3, listed.pagination
        assert listed.pagination.current_page == page
        seen += [int(s.step_id) for s in listed.steps]
    assert seen == list(range(1, 26)), seen
    print("paging: ok")


async def main(base, token, other_token):
    async with client(base, token) as c, client(base, other_token) as o, client(base, None) as a:
        api, other, anonymous = AgentApi(c), AgentApi(o), AgentApi(a)
        with tempfile.TemporaryDirectory() as files:
            await whole_task(api, other, anonymous, files)
        await paging(api)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
