/**
 * `doctor`'s SSH check, for a site whose ProviderConfig gives `ssh` (cloud-init snippets): per
 * node, the login with the Secret's key and the pinned host key, and the snippets directory the
 * provider would write to, proven by writing and removing a probe file there. Nothing else is
 * touched on the node.
 */
import type { SiteSsh } from '../api/provider-config-site.ts';
import type { PveClient } from '../proxmox/client.ts';
import { findSnippetStore, sshTarget } from '../vm/snippets.ts';

export interface SshCheck {
  id: string;
  status: 'ok' | 'fail';
  detail: string;
  fix?: string;
}

const FIX: Record<string, string> = {
  'host-key':
    "pin the node's key in spec.sites[].ssh.hostKeys (on the node: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)",
  auth: "put the public key of spec.sites[].ssh.secretRef's privateKey into ~/.ssh/authorized_keys of the SSH user on the node",
  refused: 'start sshd on the node, or fix spec.sites[].ssh.port / nodes[].port',
  unreachable: 'fix the address in spec.sites[].ssh.nodes, or the firewall between the provider and the node',
  permission: 'give the SSH user write access to the snippets directory, or log in as root',
  'disk-full': 'free space on the snippets storage',
};

/** One check per node: `ssh <node>`. */
export async function checkSsh(c: PveClient, ssh: SiteSsh, nodes: string[]): Promise<SshCheck[]> {
  const { SshError, withNodeFiles } = await import('../proxmox/ssh.ts');
  const out: SshCheck[] = [];
  for (const node of nodes) {
    const id = `ssh ${node}`;
    try {
      const store = await findSnippetStore(c, node, ssh.snippetsStorage);
      const t = await sshTarget(c, ssh, node);
      const probe = `${store.dir}/.provider-proxmox-doctor-${process.pid}`;
      await withNodeFiles(t, async (files) => {
        await files.mkdirs(store.dir);
        await files.write(probe, 'provider-proxmox doctor: may be removed\n');
        await files.remove(probe);
      });
      out.push({
        id,
        status: 'ok',
        detail: `${t.user}@${t.host}:${t.port}: host key pinned, login with the key, ${store.dir} (storage ${store.storage}) writable`,
      });
    } catch (e) {
      const kind = e instanceof SshError ? e.kind : undefined;
      out.push({
        id,
        status: 'fail',
        detail: e instanceof Error ? e.message : String(e),
        ...(kind && FIX[kind] ? { fix: FIX[kind] } : {}),
      });
    }
  }
  return out;
}
