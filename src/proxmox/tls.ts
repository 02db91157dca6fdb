/**
 * TLS for Proxmox VE endpoints: verification on by default (system CAs), a custom CA bundle,
 * SHA-256 certificate fingerprint pinning (PVE nodes ship self-signed certificates; `pvenode cert
 * info` shows the fingerprint), and an explicit insecure opt-in.
 */
import type { TLSSocket } from 'node:tls';
import { buildConnector } from 'undici';

export interface TlsSettings {
  /** Accept exactly these leaf certificates (SHA-256, any case, with or without colons). */
  fingerprints?: string[] | undefined;
  /** PEM CA bundle to verify against instead of the system CAs. */
  caBundle?: string | undefined;
  /** No verification at all. Logged as a warning when a client is made. */
  insecureSkipVerify?: boolean | undefined;
}

export type TlsMode = 'system-ca' | 'ca-bundle' | 'fingerprint' | 'insecure';

export function tlsMode(t: TlsSettings): TlsMode {
  if (t.insecureSkipVerify) return 'insecure';
  if (t.fingerprints?.length) return 'fingerprint';
  if (t.caBundle) return 'ca-bundle';
  return 'system-ca';
}

const FP_RE = /^(?:[0-9A-F]{2}:){31}[0-9A-F]{2}$/;

/** `ab:cd..`, `ABCD...` (64 hex) -> `AB:CD:...`; undefined when it is not a SHA-256 fingerprint. */
export function normalizeFingerprint(fp: string): string | undefined {
  const hex = fp
    .trim()
    .replace(/^sha256[:=\s]*/i, '')
    .replace(/[:\s]/g, '')
    .toUpperCase();
  if (!/^[0-9A-F]{64}$/.test(hex)) return undefined;
  const out = hex.match(/../g)!.join(':');
  return FP_RE.test(out) ? out : undefined;
}

/** An error raised while establishing TLS, before any request byte was sent. */
export class TlsVerifyError extends Error {
  readonly code: string;
  readonly presentedFingerprint: string | undefined;
  constructor(code: string, message: string, presentedFingerprint?: string) {
    super(message);
    this.name = 'TlsVerifyError';
    this.code = code;
    this.presentedFingerprint = presentedFingerprint;
  }
}

/** TLS error codes of Node's OpenSSL binding that mean "certificate not trusted". */
export const CERT_ERROR_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'HOSTNAME_MISMATCH',
  'PVE_TLS_FINGERPRINT_MISMATCH',
]);

/**
 * An undici connector for one TLS mode. With fingerprints, the chain is not verified; the
 * connection is accepted only when the leaf certificate's SHA-256 fingerprint is pinned, and
 * destroyed before a request is written otherwise.
 */
export function makeConnector(t: TlsSettings, connectTimeoutMs: number): buildConnector.connector {
  const mode = tlsMode(t);
  const pins = new Set((t.fingerprints ?? []).map((f) => normalizeFingerprint(f) ?? f));
  const base = buildConnector({
    timeout: connectTimeoutMs,
    rejectUnauthorized: mode === 'system-ca' || mode === 'ca-bundle',
    ...(mode === 'ca-bundle' ? { ca: t.caBundle } : {}),
    keepAlive: true,
    // A resumed TLS session carries no peer certificate to check: with pinning, always handshake fully.
    ...(mode === 'fingerprint' ? { maxCachedSessions: 0 } : {}),
  });
  if (mode !== 'fingerprint') return base;
  return (opts, callback) => {
    base(opts, (err, socket) => {
      if (err || !socket) {
        callback(err ?? new Error('connect failed'), null);
        return;
      }
      if (opts.protocol !== 'https:') {
        callback(null, socket);
        return;
      }
      const cert = (socket as TLSSocket).getPeerCertificate?.();
      const presented = cert?.fingerprint256 ? normalizeFingerprint(cert.fingerprint256) : undefined;
      if (!presented || !pins.has(presented)) {
        socket.destroy();
        callback(
          new TlsVerifyError(
            'PVE_TLS_FINGERPRINT_MISMATCH',
            `certificate fingerprint mismatch: the endpoint presented ${presented ?? 'no certificate'}, the configuration pins ${[...pins].join(', ')}`,
            presented,
          ),
          null,
        );
        return;
      }
      callback(null, socket);
    });
  };
}

/**
 * Read the certificate an endpoint presents, without trusting it (for `doctor`: it tells the user
 * which fingerprint to pin). Sends no request.
 */
export async function probeCertificate(
  url: string,
  timeoutMs = 5000,
): Promise<{ fingerprint256: string; subject: string; issuer: string; validTo: string; selfSigned: boolean }> {
  const { connect } = await import('node:tls');
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const host = u.hostname.replace(/^\[|\]$/g, '');
    const isIp = /^[\d.]+$/.test(host) || host.includes(':');
    const socket = connect({
      host,
      port: Number(u.port || 443),
      rejectUnauthorized: false,
      ...(isIp ? {} : { servername: host }),
    });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`TLS handshake with ${u.host} timed out`));
    }, timeoutMs);
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      const c = socket.getPeerCertificate();
      socket.end();
      const name = (x: unknown) =>
        x && typeof x === 'object'
          ? Object.entries(x as Record<string, unknown>)
              .map(([k, v]) => `${k}=${String(v)}`)
              .join(', ')
          : '';
      resolve({
        fingerprint256: normalizeFingerprint(c.fingerprint256 ?? '') ?? '',
        subject: name(c.subject),
        issuer: name(c.issuer),
        validTo: c.valid_to ?? '',
        selfSigned: name(c.subject) === name(c.issuer),
      });
    });
    socket.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

/**
 * What to do about a certificate that failed verification, by how the site verifies it
 * (`doctor` and the ProxmoxVM conditions say the same). `where` names the config entry.
 */
export function tlsFix(
  mode: 'fingerprint' | 'ca-bundle' | string,
  presented: string | undefined,
  where: string,
  hostname?: string,
): string {
  if (mode === 'fingerprint')
    return `the node presents ${presented ?? 'an unknown certificate'}. If that is your node's certificate (compare with \`pvenode cert info\` on the node), put it in tls.fingerprint in ${where}; otherwise someone is in the middle`;
  if (mode === 'ca-bundle')
    return `the certificate is not signed by tls.caBundle (or its name does not match ${hostname ?? 'the endpoint'}); fix caBundle, or pin the certificate: tls: { fingerprint: "${presented ?? '...'}" } in ${where}`;
  return `the node certificate is not trusted by the system CAs (PVE nodes use self-signed certificates). Pin it: tls: { fingerprint: "${presented ?? 'AB:CD:...'}" } in ${where} (check it with \`pvenode cert info\` on the node), or set tls.caBundle to the CA that signed it`;
}
