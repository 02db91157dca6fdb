/**
 * SSH keys of a simulator: one ed25519 host key per simulated node (as `pvecm`/the installer make
 * /etc/ssh/ssh_host_ed25519_key) and one client key pair whose public key root's
 * authorized_keys holds, so that tests and `--print-config` can log in. Made once per simulator
 * (and kept in `--state` files, so known hosts stay valid across restarts).
 */
import { createHash } from 'node:crypto';
import ssh2 from 'ssh2';

export interface KeyPair {
  /** OpenSSH private key (`-----BEGIN OPENSSH PRIVATE KEY-----`). */
  privateKey: string;
  /** `ssh-ed25519 AAAA… comment`, as in a .pub file or authorized_keys. */
  publicKey: string;
}

export function generateKeyPair(comment: string): KeyPair {
  // ssh2 1.17 writes about one ed25519 key in 300 that its own parseKey then refuses
  // ("Malformed OpenSSH private key"): such a key is made again, so that every client can load it.
  for (;;) {
    const k = ssh2.utils.generateKeyPairSync('ed25519', { comment });
    if (!(ssh2.utils.parseKey(k.private) instanceof Error)) return { privateKey: k.private, publicKey: k.public };
  }
}

/** The key blob of a public key line (its base64 field). */
export function publicKeyBlob(publicKey: string): Buffer {
  return Buffer.from(publicKey.trim().split(/\s+/)[1] ?? '', 'base64');
}

/** `ssh-keygen -lf`'s fingerprint: `SHA256:` and the unpadded base64 of the blob's SHA-256. */
export function fingerprint(publicKey: string): string {
  return `SHA256:${createHash('sha256').update(publicKeyBlob(publicKey)).digest('base64').replace(/=+$/, '')}`;
}

/** The public key line of an OpenSSH private key (for keys loaded from a state file). */
export function publicKeyOf(privateKey: string, comment: string): string {
  const parsed = ssh2.utils.parseKey(privateKey);
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!key || key instanceof Error)
    throw new Error(`not an SSH private key: ${key instanceof Error ? key.message : ''}`);
  return `${key.type} ${key.getPublicSSH().toString('base64')} ${comment}`;
}
